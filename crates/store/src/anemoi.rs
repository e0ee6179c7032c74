//! anemoi datasets written before anemoi named its dimensions: `data` of four unnamed axes
//! (time, variable, ensemble, cell), the variable names in the root attribute `variables`,
//! `dates` along time and `latitudes`/`longitudes` along the cells. Their axes get the names
//! later anemoi datasets give them, so time is iterated and the grid windowed as there.

use serde_json::{Map, Value};

use crate::Variable;

/// The names anemoi gives the axes of `data`.
const DATA_DIMS: [&str; 4] = ["time", "variable", "ensemble", "cell"];

/// Names the unnamed axes of an anemoi dataset's arrays; other datasets are left as they are.
pub(crate) fn name_anemoi_dims(attributes: &Map<String, Value>, variables: &mut [Variable]) {
    let Some(names) = attributes.get("variables").and_then(Value::as_array) else {
        return;
    };
    let unnamed = |variable: &Variable| {
        let dims = variable.dims();
        dims.iter()
            .enumerate()
            .all(|(axis, dim)| *dim == format!("dim_{axis}"))
    };
    let Some(data) = variables.iter().find(|v| v.name() == "data") else {
        return;
    };
    let shape = data.shape().to_vec();
    if shape.len() != 4 || !unnamed(data) || shape[1] != names.len() as u64 {
        return;
    }
    for variable in variables.iter_mut() {
        if !unnamed(variable) {
            continue;
        }
        let dims: Option<Vec<&str>> = match (variable.name(), variable.shape()) {
            ("data", _) => Some(DATA_DIMS.to_vec()),
            ("dates", [steps]) if *steps == shape[0] => Some(vec!["time"]),
            ("latitudes" | "longitudes", [cells]) if *cells == shape[3] => Some(vec!["cell"]),
            _ => None,
        };
        if let Some(dims) = dims {
            variable.rename_dims(dims.into_iter().map(str::to_string).collect());
        }
    }
}
