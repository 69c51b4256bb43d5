//! An ONNX model's input and outputs as ONNX Runtime reads them from its
//! graph (#41 item 1), over small models made by
//! `scripts/make_onnx_fixtures.py` (`tests/models/`) and an optimum export:
//! the image inputs the tool feeds (NCHW and NHWC; f32, f16, u8; fixed
//! and dynamic batch and size; optimum's named dynamic channel axis) are
//! described, and every model it cannot feed (no image input, two inputs,
//! one channel, f64, a file that is not a model or is cut short) is one
//! line naming each input and its shape. CI installs ONNX Runtime and
//! sets `PIPELINE_REQUIRE_ORT`.

use engine_onnx::graph::{Graph, Layout, PixelType, describe};

use crate::common::{onnx_fixture as fixture, onnx_runtime_or_skip as runtime_or_skip};

fn graph(name: &str) -> Graph {
    describe(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn image_inputs_are_described_as_the_graph_declares_them() {
    if !runtime_or_skip() {
        return;
    }
    let g = graph("nchw_f32_dynamic_batch");
    assert_eq!(g.input.name, "pixel_values");
    assert_eq!(
        (g.input.layout, g.input.pixels, g.input.batch, g.input.size),
        (Layout::Nchw, PixelType::F32, None, Some((32, 32)))
    );
    let outputs: Vec<(&str, &[i64])> = g
        .outputs
        .iter()
        .map(|o| (o.name.as_str(), o.shape.as_slice()))
        .collect();
    assert_eq!(outputs, [("logits", &[-1i64, 7][..])]);

    let g = graph("nhwc_u8_batch_1");
    assert_eq!(
        (g.input.layout, g.input.pixels, g.input.batch, g.input.size),
        (Layout::Nhwc, PixelType::U8, Some(1), Some((24, 20)))
    );

    let g = graph("two_outputs_f16");
    assert_eq!(g.input.pixels, PixelType::F16);
    let names: Vec<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["embedding", "logits"]);

    let g = graph("dynamic_size");
    assert_eq!((g.input.batch, g.input.size), (None, None));
}

/// optimum's exports (`cli/tests/onnx_upstream/hf_vit_multi_label/`,
/// `scripts/make_onnx_multi_label.py`) leave every axis dynamic, the
/// channels' named `num_channels`: NCHW, fed three channels.
#[test]
fn an_optimum_export_s_named_channel_axis_is_nchw() {
    if !runtime_or_skip() {
        return;
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../cli/tests/onnx_upstream/hf_vit_multi_label/model.onnx");
    let g = describe(&path).unwrap_or_else(|e| panic!("optimum's export: {e}"));
    assert_eq!(
        (g.input.layout, g.input.pixels, g.input.batch, g.input.size),
        (Layout::Nchw, PixelType::F32, None, None)
    );
    assert_eq!(g.input.batch_symbol, "batch_size");
}

#[test]
fn a_model_the_tool_cannot_feed_is_one_line_naming_its_inputs() {
    if !runtime_or_skip() {
        return;
    }
    for (name, says) in [
        ("text_input", "input_ids [?, 77] Int64"),
        (
            "two_images",
            "has 2: a [?, 3, 8, 8] Float32, b [?, 3, 8, 8] Float32",
        ),
        ("one_channel", "x [?, 1, 8, 8] Float32"),
        ("f64_input", "takes Float64"),
        ("not_onnx", "not a model ONNX Runtime loads"),
        ("truncated", "not a model ONNX Runtime loads"),
    ] {
        let e = describe(&fixture(name)).expect_err(name);
        assert!(e.contains(says), "{name}: {e}");
        assert!(
            e.contains(&format!("{name}.onnx")),
            "{name}: names the file: {e}"
        );
        assert!(!e.contains('\n'), "{name}: {e}");
    }
}
