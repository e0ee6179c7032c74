//! What windows do at the end of a dimension.

use serde::{Deserialize, Serialize};

/// What happens at the end of a dimension that the windows do not tile exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Edge {
    /// Windows that would cross the end are not produced (xbatcher's behaviour).
    #[default]
    Drop,
    /// The last window crosses the end; what lies beyond holds the pad value, and batches carry
    /// a mask of the valid elements.
    Pad,
    /// One more window, shifted back to end exactly at the edge (so it overlaps its neighbour
    /// more than the others do).
    Shift,
}
