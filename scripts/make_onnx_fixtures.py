"""Small ONNX models for `gpu-worker/onnx/tests/it/graph.rs`: each input
shape the tool must feed or refuse, built with the `onnx` package's
helpers (no torch), checked with `onnx.checker`, opset 17.

    pip install onnx
    python scripts/make_onnx_fixtures.py gpu-worker/onnx/tests/models
"""

import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, F16, U8, I64, F64 = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.UINT8,
                          TensorProto.INT64, TensorProto.DOUBLE)


def model(name, inputs, outputs, nodes, inits=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                          producer_name="pipeline fixtures")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def pooled(src, out="pooled"):
    return [helper.make_node("GlobalAveragePool", [src], ["gap"]),
            helper.make_node("Flatten", ["gap"], [out])]


def head(src, classes=7, out="logits"):
    rng = np.random.default_rng(41)
    w = numpy_helper.from_array(rng.standard_normal((3, classes)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "b")
    return [helper.make_node("Gemm", [src, "w", "b"], [out])], [w, b]


def main(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    t = helper.make_tensor_value_info
    models = {}
    nodes, inits = head("pooled")
    models["nchw_f32_dynamic_batch"] = model(
        "classifier", [t("pixel_values", F32, ["batch", 3, 32, 32])],
        [t("logits", F32, ["batch", 7])], pooled("pixel_values") + nodes, inits)
    models["nhwc_u8_batch_1"] = model(
        "bytes", [t("image", U8, [1, 24, 20, 3])], [t("features", F32, [1, 3])],
        [helper.make_node("Cast", ["image"], ["f"], to=F32),
         helper.make_node("Transpose", ["f"], ["nchw"], perm=[0, 3, 1, 2])] + pooled("nchw", "features"))
    nodes, inits = head("embedding")
    models["two_outputs_f16"] = model(
        "two", [t("x", F16, ["n", 3, 16, 16])],
        [t("embedding", F32, ["n", 3]), t("logits", F32, ["n", 7])],
        [helper.make_node("Cast", ["x"], ["xf"], to=F32)] + pooled("xf", "embedding") + nodes, inits)
    models["dynamic_size"] = model(
        "anysize", [t("x", F32, ["n", 3, "h", "w"])], [t("y", F32, ["n", 3])], pooled("x", "y"))
    models["text_input"] = model(
        "text", [t("input_ids", I64, ["n", 77])], [t("y", F32, ["n", 1])],
        [helper.make_node("Cast", ["input_ids"], ["f"], to=F32),
         helper.make_node("ReduceMean", ["f"], ["y"], axes=[1], keepdims=1)])
    models["two_images"] = model(
        "pair", [t("a", F32, ["n", 3, 8, 8]), t("b", F32, ["n", 3, 8, 8])], [t("y", F32, ["n", 3])],
        [helper.make_node("Add", ["a", "b"], ["s"])] + pooled("s", "y"))
    models["f64_input"] = model(
        "double", [t("x", F64, ["n", 3, 8, 8])], [t("y", F32, ["n", 3])],
        [helper.make_node("Cast", ["x"], ["xf"], to=F32)] + pooled("xf", "y"))
    models["one_channel"] = model(
        "gray", [t("x", F32, ["n", 1, 8, 8])], [t("y", F32, ["n", 1])], pooled("x", "y"))
    # For the engine's tests (gpu-worker/onnx/tests/it/engine.rs): a fixed
    # batch of 2 in NHWC bytes, and a classifier whose logits are known
    # (the three channel means, then 0.5 and -0.5).
    models["nhwc_u8_batch_2"] = model(
        "bytes2", [t("image", U8, [2, 6, 6, 3])], [t("features", F32, [2, 3])],
        [helper.make_node("Cast", ["image"], ["f"], to=F32),
         helper.make_node("Transpose", ["f"], ["nchw"], perm=[0, 3, 1, 2])] + pooled("nchw", "features"))
    w = numpy_helper.from_array(np.eye(3, 5, dtype=np.float32), "w")
    b = numpy_helper.from_array(np.array([0, 0, 0, 0.5, -0.5], dtype=np.float32), "b")
    models["classifier_known"] = model(
        "known", [t("x", F32, ["n", 3, 8, 8])], [t("logits", F32, ["n", 5])],
        pooled("x") + [helper.make_node("Gemm", ["pooled", "w", "b"], ["logits"])], [w, b])
    # An output whose width the graph leaves dynamic (a flattened input of
    # any size: ONNX Runtime infers a fixed input's).
    models["dynamic_width"] = model(
        "flat", [t("x", F32, ["n", 3, "h", "w"])], [t("y", F32, ["n", "d"])],
        [helper.make_node("Flatten", ["x"], ["y"])])
    # A detector's shape of outputs for --task raw: per image two "boxes"
    # (the channel means twice, [2, 3] f32), the brightest channel (a
    # scalar i64), which channel means are positive ([3] bool); and two
    # outputs with no batch axis: the input's shape ([4] i64), and every
    # mean of the batch in a column whose dynamic first axis is named
    # `num_dets`, not the input's `n` (as a detector's NMS output is).
    shape = numpy_helper.from_array(np.array([-1, 2, 3], dtype=np.int64), "shape")
    column = numpy_helper.from_array(np.array([-1, 1], dtype=np.int64), "column")
    models["detector_like"] = model(
        "detector", [t("x", F32, ["n", 3, 8, 8])],
        [t("boxes", F32, ["n", 2, 3]), t("classes", I64, ["n"]), t("positive", TensorProto.BOOL, ["n", 3]),
         t("input_shape", I64, [4]), t("detections", F32, ["num_dets", 1])],
        pooled("x", "means") + [
            helper.make_node("Concat", ["means", "means"], ["pair"], axis=1),
            helper.make_node("Reshape", ["pair", "shape"], ["boxes"]),
            helper.make_node("ArgMax", ["means"], ["classes"], axis=1, keepdims=0),
            helper.make_node("Greater", ["means", "zero"], ["positive"]),
            helper.make_node("Shape", ["x"], ["input_shape"]),
            helper.make_node("Reshape", ["means", "column"], ["detections"])],
        [shape, column, numpy_helper.from_array(np.zeros(1, dtype=np.float32), "zero")])
    # Raw outputs of 64 MiB an image (each image's channel-0 mean spread
    # over 4096 × 4096): more than a chunk's message holds at the default
    # --chunk-size, refused before any worker starts.
    spread = numpy_helper.from_array(np.array([1, 4096, 4096], dtype=np.int64), "spread")
    cube = numpy_helper.from_array(np.array([-1, 1, 1], dtype=np.int64), "cube")
    models["huge_raw"] = model(
        "huge", [t("x", F32, ["n", 3, 8, 8])], [t("planes", F32, ["n", 4096, 4096])],
        pooled("x", "means") + [
            helper.make_node("Slice", ["means", "start", "end", "axis"], ["first"]),
            helper.make_node("Reshape", ["first", "cube"], ["column"]),
            helper.make_node("Expand", ["column", "spread"], ["planes"])],
        [spread, cube, numpy_helper.from_array(np.array([0], dtype=np.int64), "start"),
         numpy_helper.from_array(np.array([1], dtype=np.int64), "end"),
         numpy_helper.from_array(np.array([1], dtype=np.int64), "axis")])
    for name, m in models.items():
        onnx.save(m, out / f"{name}.onnx")
    whole = (out / "nchw_f32_dynamic_batch.onnx").read_bytes()
    (out / "truncated.onnx").write_bytes(whole[: len(whole) // 2])
    (out / "not_onnx.onnx").write_text("this is not a model\n")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
