//! Finding the arrays of a Zarr v2 or v3 hierarchy and reading their metadata, from
//! consolidated metadata when the store has it (one request) or by listing otherwise.

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use zarrs::array::{ArrayMetadata, ArrayMetadataV2};
use zarrs::metadata::v3::ArrayMetadataV3;

use crate::io::{object_path, GetFailure};
use crate::location::Location;
use crate::{Error, Result};

/// The arrays of a hierarchy, with the root group's attributes.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    pub zarr_format: u8,
    pub consolidated: bool,
    pub attributes: Map<String, Value>,
    /// (path relative to the root, metadata); a root array has the path "". Metadata that
    /// does not parse is kept as its error, given when the array is used.
    pub arrays: Vec<(String, Result<ArrayMetadata>)>,
}

pub(crate) async fn read_hierarchy(location: &Location) -> Result<Hierarchy> {
    if let Some(root) = read_json(location, "zarr.json").await? {
        check_format(location, "zarr.json", &root, 3)?;
        return read_v3(location, root).await;
    }
    if let Some(consolidated) = read_json(location, ".zmetadata").await? {
        return read_v2_consolidated(location, consolidated);
    }
    if let Some(group) = read_json(location, ".zgroup").await? {
        check_format(location, ".zgroup", &group, 2)?;
        let attributes = read_attributes(location, ".zattrs").await?;
        let mut arrays = Vec::new();
        list_arrays(location, 2, String::new(), &mut arrays).await?;
        return Ok(Hierarchy {
            zarr_format: 2,
            consolidated: false,
            attributes,
            arrays,
        });
    }
    if let Some(array) = read_json(location, ".zarray").await? {
        check_format(location, ".zarray", &array, 2)?;
        let attributes = read_attributes(location, ".zattrs").await?;
        let metadata = parse_v2(location, ".zarray", array, attributes)?;
        return Ok(Hierarchy {
            zarr_format: 2,
            consolidated: false,
            attributes: Map::new(),
            arrays: vec![(String::new(), Ok(metadata))],
        });
    }
    Err(Error::NotZarr {
        url: location.url.clone(),
    })
}

async fn read_v3(location: &Location, root: Value) -> Result<Hierarchy> {
    if node_type(&root) == Some("array") {
        let metadata = parse_v3(location, "zarr.json", root)?;
        let arrays = vec![(String::new(), Ok(metadata))];
        return Ok(Hierarchy {
            zarr_format: 3,
            consolidated: false,
            attributes: Map::new(),
            arrays,
        });
    }
    let attributes = attributes_of(&root);
    // zarr-python writes consolidated metadata inline in the root zarr.json (not in the spec).
    if let Some(Value::Object(nodes)) = root.pointer("/consolidated_metadata/metadata") {
        let mut arrays = Vec::new();
        for (path, node) in nodes {
            if node_type(node) == Some("array") {
                let key = format!("zarr.json#consolidated_metadata/{path}");
                arrays.push((path.clone(), parse_v3(location, &key, node.clone())));
            }
        }
        arrays.sort_by(|a, b| a.0.cmp(&b.0));
        return Ok(Hierarchy {
            zarr_format: 3,
            consolidated: true,
            attributes,
            arrays,
        });
    }
    let mut arrays = Vec::new();
    list_arrays(location, 3, String::new(), &mut arrays).await?;
    Ok(Hierarchy {
        zarr_format: 3,
        consolidated: false,
        attributes,
        arrays,
    })
}

/// What a child of a group is.
enum Node {
    /// An array, or a node whose metadata does not parse (kept as its error).
    Array(Box<Result<ArrayMetadata>>),
    Group,
    Other,
}

/// Walks the children of the group at `prefix`, depth first, in name order.
fn list_arrays<'a>(
    location: &'a Location,
    zarr_format: u8,
    prefix: String,
    arrays: &'a mut Vec<(String, Result<ArrayMetadata>)>,
) -> BoxFuture<'a, Result<()>> {
    Box::pin(async move {
        for child in list_children(location, &prefix).await? {
            match read_node(location, zarr_format, &child).await? {
                Node::Array(metadata) => arrays.push((child, *metadata)),
                Node::Group => list_arrays(location, zarr_format, child, arrays).await?,
                Node::Other => {}
            }
        }
        Ok(())
    })
}

/// Reads the metadata of the node at `path`: `zarr.json` in v3, `.zarray`/`.zgroup` in v2.
async fn read_node(location: &Location, zarr_format: u8, path: &str) -> Result<Node> {
    if zarr_format == 3 {
        let key = format!("{path}/zarr.json");
        let node = match read_json(location, &key).await {
            Ok(Some(node)) => node,
            Ok(None) => return Ok(Node::Other),
            // Not JSON: perhaps an array, perhaps a group; an error when it is used.
            Err(error @ Error::MalformedMetadata { .. }) => {
                return Ok(Node::Array(Box::new(Err(error))))
            }
            Err(error) => return Err(error),
        };
        return Ok(match node_type(&node) {
            Some("group") => Node::Group,
            // An array, or a zarr.json zarrpipe does not understand: an error when used.
            _ => Node::Array(Box::new(parse_v3(location, &key, node))),
        });
    }
    let key = format!("{path}/.zarray");
    let array = match read_json(location, &key).await {
        Ok(array) => array,
        Err(error @ Error::MalformedMetadata { .. }) => {
            return Ok(Node::Array(Box::new(Err(error))))
        }
        Err(error) => return Err(error),
    };
    if let Some(array) = array {
        let attributes = match read_attributes(location, &format!("{path}/.zattrs")).await {
            Ok(attributes) => attributes,
            Err(error @ Error::MalformedMetadata { .. }) => {
                return Ok(Node::Array(Box::new(Err(error))))
            }
            Err(error) => return Err(error),
        };
        let metadata = parse_v2(location, &key, array, attributes);
        return Ok(Node::Array(Box::new(metadata)));
    }
    let group = read_json(location, &format!("{path}/.zgroup")).await?;
    Ok(if group.is_some() {
        Node::Group
    } else {
        Node::Other
    })
}

fn read_v2_consolidated(location: &Location, consolidated: Value) -> Result<Hierarchy> {
    let malformed = |message: &str| Error::MalformedMetadata {
        url: location.url.clone(),
        key: ".zmetadata".into(),
        source: serde::de::Error::custom(message),
    };
    let Some(Value::Object(documents)) = consolidated.get("metadata") else {
        return Err(malformed("no `metadata` object"));
    };
    let attributes = match documents.get(".zattrs") {
        Some(Value::Object(attributes)) => attributes.clone(),
        _ => Map::new(),
    };
    let mut arrays = Vec::new();
    for (key, array) in documents {
        let Some(path) = key.strip_suffix(".zarray") else {
            continue;
        };
        let path = path.trim_end_matches('/').to_string();
        let attributes = match documents.get(&format!("{}.zattrs", key.trim_end_matches(".zarray")))
        {
            Some(Value::Object(attributes)) => attributes.clone(),
            _ => Map::new(),
        };
        let key = format!(".zmetadata#{key}");
        arrays.push((path, parse_v2(location, &key, array.clone(), attributes)));
    }
    arrays.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Hierarchy {
        zarr_format: 2,
        consolidated: true,
        attributes,
        arrays,
    })
}

async fn list_children(location: &Location, prefix: &str) -> Result<Vec<String>> {
    let path = match prefix.is_empty() {
        true => None,
        false => Some(object_path(prefix).map_err(|source| Error::List {
            url: location.url.clone(),
            prefix: prefix.to_string(),
            source,
        })?),
    };
    let listing = location
        .store
        .list_with_delimiter(path.as_ref())
        .await
        .map_err(|source| Error::List {
            url: location.url.clone(),
            prefix: prefix.to_string(),
            source,
        })?;
    let mut children: Vec<String> = listing
        .common_prefixes
        .iter()
        .map(|child| child.as_ref().to_string())
        .collect();
    children.sort();
    Ok(children)
}

/// Reads and parses a JSON document; `None` when the key does not exist.
pub(crate) async fn read_json(location: &Location, key: &str) -> Result<Option<Value>> {
    let bytes = match location.io.get(key, None).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(GetFailure::Store(source)) => {
            return Err(Error::ReadMetadata {
                url: location.url.clone(),
                key: key.to_string(),
                source,
            })
        }
        Err(GetFailure::Timeout(after)) => {
            return Err(Error::MetadataTimeout {
                url: location.url.clone(),
                key: key.to_string(),
                after,
            })
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| Error::MalformedMetadata {
            url: location.url.clone(),
            key: key.to_string(),
            source,
        })
}

async fn read_attributes(location: &Location, key: &str) -> Result<Map<String, Value>> {
    match read_json(location, key).await? {
        Some(Value::Object(attributes)) => Ok(attributes),
        _ => Ok(Map::new()),
    }
}

fn parse_v3(location: &Location, key: &str, document: Value) -> Result<ArrayMetadata> {
    let metadata: ArrayMetadataV3 =
        serde_json::from_value(document).map_err(|source| Error::MalformedMetadata {
            url: location.url.clone(),
            key: key.to_string(),
            source,
        })?;
    Ok(ArrayMetadata::V3(metadata))
}

fn parse_v2(
    location: &Location,
    key: &str,
    document: Value,
    attributes: Map<String, Value>,
) -> Result<ArrayMetadata> {
    let mut metadata: ArrayMetadataV2 =
        serde_json::from_value(document).map_err(|source| Error::MalformedMetadata {
            url: location.url.clone(),
            key: key.to_string(),
            source,
        })?;
    metadata.attributes = attributes;
    Ok(ArrayMetadata::V2(metadata))
}

/// A root document must be a JSON object of the format its name promises, as zarr-python
/// requires: a list, or `zarr_format: 4`, is refused rather than read as something else.
fn check_format(location: &Location, key: &str, document: &Value, expected: u64) -> Result<()> {
    let found = match document {
        Value::Object(map) => map.get("zarr_format"),
        _ => {
            return Err(Error::MalformedMetadata {
                url: location.url.clone(),
                key: key.to_string(),
                source: serde::de::Error::custom("expected a JSON object"),
            })
        }
    };
    match found.and_then(Value::as_u64) {
        Some(format) if format == expected => Ok(()),
        _ => Err(Error::MalformedMetadata {
            url: location.url.clone(),
            key: key.to_string(),
            source: serde::de::Error::custom(format!(
                "expected `zarr_format: {expected}`, found {}",
                found.map_or("none".to_string(), Value::to_string)
            )),
        }),
    }
}

fn node_type(document: &Value) -> Option<&str> {
    document.get("node_type").and_then(Value::as_str)
}

fn attributes_of(document: &Value) -> Map<String, Value> {
    match document.get("attributes") {
        Some(Value::Object(attributes)) => attributes.clone(),
        _ => Map::new(),
    }
}
