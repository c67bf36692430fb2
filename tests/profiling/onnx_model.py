"""A one-MatMul ONNX model written as protobuf bytes by hand (the onnx package is not needed)."""

from __future__ import annotations

import struct

FLOAT = 1
"""TensorProto.DataType FLOAT."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _number(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _nested(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _value_info(name: str, shape: list[int]) -> bytes:
    dims = b"".join(_nested(1, _number(1, d)) for d in shape)  # TensorShapeProto.dim
    tensor = _number(1, FLOAT) + _nested(2, dims)  # TypeProto.Tensor: elem_type, shape
    return _nested(1, name) + _nested(2, _nested(1, tensor))  # ValueInfoProto: name, type


def matmul_model(rows: int, inner: int, cols: int, weight: float = 0.5) -> bytes:
    """``Y[rows, cols] = X[rows, inner] @ W``, W a constant ``inner x cols`` of ``weight``."""
    raw = struct.pack(f"<{inner * cols}f", *([weight] * (inner * cols)))
    initializer = (_number(1, inner) + _number(1, cols) + _number(2, FLOAT)  # dims, data_type
                   + _nested(8, "W") + _nested(9, raw))  # name, raw_data
    node = (_nested(1, "X") + _nested(1, "W") + _nested(2, "Y") + _nested(3, "mm")
            + _nested(4, "MatMul"))  # inputs, output, name, op_type
    graph = (_nested(1, node) + _nested(2, "g") + _nested(5, initializer)
             + _nested(11, _value_info("X", [rows, inner]))
             + _nested(12, _value_info("Y", [rows, cols])))
    opset = _nested(1, "") + _number(2, 13)  # OperatorSetIdProto: domain, version
    return _number(1, 8) + _nested(7, graph) + _nested(8, opset)  # ir_version, graph, opset
