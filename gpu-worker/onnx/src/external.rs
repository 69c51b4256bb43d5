//! The files an ONNX model keeps its weights in beside it (#41): a model
//! over 2 GB, and any saved with `save_as_external_data`, holds only each
//! tensor's location (`external_data`'s `location`, a path relative to the
//! model's folder) and ONNX Runtime reads the bytes from there. The CLI
//! needs their names before any worker starts: to fetch them with a
//! remote model, to say which one is missing beside a local one, and to
//! fold their bytes into the model's fingerprint, so resume refuses
//! changed weights.
//!
//! The model is a protobuf (`onnx.proto`); `prost` reads the few fields
//! that can hold a tensor (initializers, sparse initializers, node
//! attributes, subgraphs and functions) and skips every other byte, so an
//! inline model's weights are never copied. ONNX Runtime has no call that
//! lists them, and the crates that carry the whole schema bring a second
//! protobuf runtime or a whole inference engine for six messages.

use std::collections::BTreeSet;
use std::path::{Component, Path};

use prost::Message;

/// `ModelProto`: the graph, and functions whose nodes may hold tensors.
#[derive(Clone, PartialEq, prost::Message)]
struct ModelProto {
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "25")]
    functions: Vec<FunctionProto>,
}

/// `GraphProto`: nodes and initializers.
#[derive(Clone, PartialEq, prost::Message)]
struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeProto>,
    #[prost(message, repeated, tag = "5")]
    initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "15")]
    sparse_initializer: Vec<SparseTensorProto>,
}

/// `FunctionProto`: its nodes.
#[derive(Clone, PartialEq, prost::Message)]
struct FunctionProto {
    #[prost(message, repeated, tag = "7")]
    node: Vec<NodeProto>,
}

/// `NodeProto`: its attributes.
#[derive(Clone, PartialEq, prost::Message)]
struct NodeProto {
    #[prost(message, repeated, tag = "5")]
    attribute: Vec<AttributeProto>,
}

/// `AttributeProto`: the fields that hold tensors or graphs.
#[derive(Clone, PartialEq, prost::Message)]
struct AttributeProto {
    #[prost(message, optional, tag = "5")]
    t: Option<TensorProto>,
    #[prost(message, optional, tag = "6")]
    g: Option<GraphProto>,
    #[prost(message, repeated, tag = "10")]
    tensors: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    graphs: Vec<GraphProto>,
    #[prost(message, optional, tag = "22")]
    sparse_tensor: Option<SparseTensorProto>,
    #[prost(message, repeated, tag = "23")]
    sparse_tensors: Vec<SparseTensorProto>,
}

/// `SparseTensorProto`: two tensors.
#[derive(Clone, PartialEq, prost::Message)]
struct SparseTensorProto {
    #[prost(message, optional, tag = "1")]
    values: Option<TensorProto>,
    #[prost(message, optional, tag = "2")]
    indices: Option<TensorProto>,
}

/// `TensorProto`: where its bytes are, when not inline.
#[derive(Clone, PartialEq, prost::Message)]
struct TensorProto {
    #[prost(message, repeated, tag = "13")]
    external_data: Vec<StringStringEntryProto>,
    /// `DEFAULT` (0) or `EXTERNAL` (1).
    #[prost(int32, tag = "14")]
    data_location: i32,
}

/// `StringStringEntryProto`.
#[derive(Clone, PartialEq, prost::Message)]
struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(string, tag = "2")]
    value: String,
}

/// `TensorProto.DataLocation.EXTERNAL`.
const EXTERNAL: i32 = 1;

/// The external-data files `model` (an ONNX file's bytes) names, each once,
/// sorted: paths relative to the model's folder. Empty for a model that
/// holds its weights; `None` for bytes that are no model (reading its
/// graph then says why). A location that leaves the model's folder
/// (absolute, or through `..`) is refused, as ONNX Runtime refuses it.
pub fn external_files(model: &[u8]) -> Result<Option<Vec<String>>, String> {
    let Ok(model) = ModelProto::decode(model) else {
        return Ok(None);
    };
    let mut found = BTreeSet::new();
    if let Some(graph) = &model.graph {
        graph_files(graph, &mut found);
    }
    for function in &model.functions {
        nodes_files(&function.node, &mut found);
    }
    for location in &found {
        let path = Path::new(location);
        let inside = !location.is_empty()
            && path
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !inside {
            return Err(format!(
                "its external data location {location:?} is outside the model's folder"
            ));
        }
    }
    Ok(Some(found.into_iter().collect()))
}

fn graph_files(graph: &GraphProto, found: &mut BTreeSet<String>) {
    for tensor in &graph.initializer {
        tensor_file(tensor, found);
    }
    for sparse in &graph.sparse_initializer {
        sparse_files(sparse, found);
    }
    nodes_files(&graph.node, found);
}

fn nodes_files(nodes: &[NodeProto], found: &mut BTreeSet<String>) {
    for attribute in nodes.iter().flat_map(|n| &n.attribute) {
        for tensor in attribute.t.iter().chain(&attribute.tensors) {
            tensor_file(tensor, found);
        }
        for sparse in attribute
            .sparse_tensor
            .iter()
            .chain(&attribute.sparse_tensors)
        {
            sparse_files(sparse, found);
        }
        for graph in attribute.g.iter().chain(&attribute.graphs) {
            graph_files(graph, found);
        }
    }
}

fn sparse_files(sparse: &SparseTensorProto, found: &mut BTreeSet<String>) {
    for tensor in sparse.values.iter().chain(&sparse.indices) {
        tensor_file(tensor, found);
    }
}

fn tensor_file(tensor: &TensorProto, found: &mut BTreeSet<String>) {
    if tensor.data_location != EXTERNAL {
        return;
    }
    if let Some(entry) = tensor.external_data.iter().find(|e| e.key == "location") {
        found.insert(entry.value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(model: &str) -> Vec<u8> {
        let path = format!(
            "{}/../../cli/tests/onnx_upstream/{model}/model.onnx",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// `onnx`'s own `save_as_external_data` (scripts/make_onnx_upstream.py)
    /// names its one data file; the same model saved whole names none.
    #[test]
    fn a_model_saved_with_external_data_names_its_file() {
        assert_eq!(
            external_files(&upstream("hf_vit_external")),
            Ok(Some(vec!["model.onnx_data".to_owned()]))
        );
        for inline in ["hf_vit", "hf_dinov2", "timm_vit", "timm_convnext"] {
            assert_eq!(
                external_files(&upstream(inline)),
                Ok(Some(vec![])),
                "{inline}"
            );
        }
    }

    fn tensor(location: &str) -> TensorProto {
        TensorProto {
            external_data: vec![
                StringStringEntryProto {
                    key: "offset".into(),
                    value: "0".into(),
                },
                StringStringEntryProto {
                    key: "location".into(),
                    value: location.into(),
                },
            ],
            data_location: EXTERNAL,
        }
    }

    /// Every place a tensor can be: initializers, sparse ones, a
    /// Constant's attribute, a subgraph's initializer (an If's branch), a
    /// function's node; each file once, sorted; and a location outside the
    /// folder refused.
    #[test]
    fn every_place_a_tensor_lives_is_read() {
        let node = |attribute: AttributeProto| NodeProto {
            attribute: vec![attribute],
        };
        let branch = GraphProto {
            initializer: vec![tensor("sub/branch.bin")],
            ..Default::default()
        };
        let model = ModelProto {
            graph: Some(GraphProto {
                initializer: vec![tensor("w.bin"), tensor("w.bin")],
                sparse_initializer: vec![SparseTensorProto {
                    values: Some(tensor("sparse.bin")),
                    indices: None,
                }],
                node: vec![
                    node(AttributeProto {
                        t: Some(tensor("constant.bin")),
                        ..Default::default()
                    }),
                    node(AttributeProto {
                        g: Some(branch),
                        ..Default::default()
                    }),
                    node(AttributeProto {
                        t: Some(TensorProto {
                            data_location: 0,
                            ..tensor("inline-despite-its-entry.bin")
                        }),
                        ..Default::default()
                    }),
                ],
            }),
            functions: vec![FunctionProto {
                node: vec![node(AttributeProto {
                    tensors: vec![tensor("function.bin")],
                    ..Default::default()
                })],
            }],
        };
        assert_eq!(
            external_files(&model.encode_to_vec()),
            Ok(Some(
                [
                    "constant.bin",
                    "function.bin",
                    "sparse.bin",
                    "sub/branch.bin",
                    "w.bin"
                ]
                .map(String::from)
                .to_vec()
            ))
        );
        for outside in ["../w.bin", "/etc/w.bin", "a/../../w.bin", ""] {
            let model = ModelProto {
                graph: Some(GraphProto {
                    initializer: vec![tensor(outside)],
                    ..Default::default()
                }),
                functions: vec![],
            };
            let error = external_files(&model.encode_to_vec()).expect_err(outside);
            assert!(error.contains("outside the model's folder"), "{error}");
        }
        assert_eq!(external_files(b"\xff\xff\xff not a model"), Ok(None));
    }
}
