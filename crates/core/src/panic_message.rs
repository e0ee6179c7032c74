//! The text of a caught panic, for errors that name what panicked.

/// The text a panic was raised with (`"(no message)"` when it was not text).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(text), _) => text.to_string(),
        (_, Some(text)) => text.clone(),
        _ => "(no message)".to_string(),
    }
}
