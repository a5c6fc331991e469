"""A dependency-light reader (and writer) for Hugging Face safetensors directories.

Only headers are parsed up front (a few KB per shard); tensor bytes are read one tensor at a time
with `os.pread`, so host memory holds at most the tensors the caller keeps. Every problem is reported
with the file and the tensor it concerns.

File format: 8-byte little-endian header length N, N bytes of JSON
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`, then the data
(offsets relative to the end of the header).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from typing import Any, Iterable, Mapping, Optional

import ml_dtypes
import numpy as np

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"

DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
    "I16": np.dtype("<i2"), "U16": np.dtype("<u2"), "I32": np.dtype("<i4"), "U32": np.dtype("<u4"),
    "I64": np.dtype("<i8"), "U64": np.dtype("<u8"), "F16": np.dtype("<f2"), "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"), "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn), "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}
_NP_TO_ST = {v: k for k, v in DTYPES.items()}

MAX_HEADER_BYTES = 100 * 1024 * 1024


class CheckpointError(ValueError):
  """A checkpoint the engine cannot load, naming the file and tensor and what was expected."""


@dataclasses.dataclass(frozen=True)
class TensorInfo:
  name: str
  file: str              # absolute path of the shard
  dtype: str             # safetensors dtype string, e.g. "BF16"
  shape: tuple[int, ...]
  begin: int             # absolute byte offsets in the file
  end: int

  @property
  def nbytes(self) -> int:
    return self.end - self.begin


def read_header(path: str) -> tuple[dict[str, TensorInfo], dict[str, str]]:
  """Parses and checks one shard's header. Returns ({name: TensorInfo}, metadata)."""
  try:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
      head = f.read(8)
      if len(head) < 8:
        raise CheckpointError(f"{path}: truncated safetensors file ({size} bytes, shorter than the 8-byte header length)")
      (n,) = struct.unpack("<Q", head)
      if n > MAX_HEADER_BYTES or 8 + n > size:
        raise CheckpointError(f"{path}: truncated or corrupt safetensors file: header claims {n} bytes, "
                              f"file has {size} bytes")
      raw = f.read(n)
  except OSError as e:
    raise CheckpointError(f"{path}: cannot read safetensors file ({e})") from None
  try:
    header = json.loads(raw.decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise CheckpointError(f"{path}: corrupt safetensors header ({e})") from None
  meta = header.pop("__metadata__", None) or {}
  data_start = 8 + n
  out: dict[str, TensorInfo] = {}
  for name, h in header.items():
    try:
      dtype, shape, (b, e) = h["dtype"], tuple(int(s) for s in h["shape"]), h["data_offsets"]
    except (KeyError, TypeError, ValueError):
      raise CheckpointError(f"{path}: tensor '{name}': malformed header entry {h!r}") from None
    if dtype not in DTYPES:
      raise CheckpointError(f"{path}: tensor '{name}': unknown safetensors dtype {dtype!r}")
    want = math.prod(shape) * DTYPES[dtype].itemsize
    if e - b != want or b < 0:
      raise CheckpointError(f"{path}: tensor '{name}': data_offsets [{b}, {e}] hold {e - b} bytes, "
                            f"but {dtype}{list(shape)} needs {want}")
    if data_start + e > size:
      raise CheckpointError(f"{path}: truncated shard: tensor '{name}' ends at byte {data_start + e} "
                            f"but the file has only {size} bytes")
    out[name] = TensorInfo(name, path, dtype, shape, data_start + b, data_start + e)
  return out, meta


def read_tensor(info: TensorInfo) -> np.ndarray:
  """Reads one tensor into a fresh NumPy array (host memory = the tensor's size)."""
  buf = bytearray(info.nbytes)
  view = memoryview(buf)
  try:
    fd = os.open(info.file, os.O_RDONLY)
    try:
      got = 0
      while got < info.nbytes:
        k = os.preadv(fd, [view[got:]], info.begin + got)
        if k <= 0:
          raise CheckpointError(f"{info.file}: truncated shard: tensor '{info.name}' needs bytes "
                                f"[{info.begin}, {info.end}) but reading stopped at {info.begin + got}")
        got += k
    finally:
      os.close(fd)
  except OSError as e:
    raise CheckpointError(f"{info.file}: cannot read tensor '{info.name}' ({e})") from None
  return np.frombuffer(buf, dtype=DTYPES[info.dtype]).reshape(info.shape)


class SafetensorsDir:
  """An HF checkpoint directory: config.json plus model.safetensors.index.json or model.safetensors
  (any `*.safetensors` files are accepted without an index). Only headers are read here."""

  def __init__(self, path: str, *, config_required: bool = True):
    self.path = os.path.abspath(path)
    if not os.path.isdir(self.path):
      raise CheckpointError(f"{path}: not a directory (expected a Hugging Face checkpoint directory)")
    self.config_path = os.path.join(self.path, "config.json")
    self.config: Optional[dict[str, Any]] = None
    if os.path.exists(self.config_path):
      try:
        with open(self.config_path) as f:
          self.config = json.load(f)
      except json.JSONDecodeError as e:
        raise CheckpointError(f"{self.config_path}: not valid JSON ({e})") from None
    elif config_required:
      raise CheckpointError(f"{self.config_path}: no such file (every Hugging Face checkpoint has a config.json)")
    self.tensors: dict[str, TensorInfo] = {}
    self.metadata: dict[str, dict[str, str]] = {}
    index_path = os.path.join(self.path, INDEX_NAME)
    if os.path.exists(index_path):
      self._read_index(index_path)
    else:
      files = sorted(f for f in os.listdir(self.path) if f.endswith(".safetensors"))
      if not files:
        raise CheckpointError(f"{self.path}: no {INDEX_NAME} and no *.safetensors files")
      for fname in files:
        self._add_shard(os.path.join(self.path, fname))
    self.shards = sorted({t.file for t in self.tensors.values()})

  def _add_shard(self, file: str, expected: Optional[Iterable[str]] = None, index_path: str = ""):
    infos, meta = read_header(file)
    self.metadata[file] = meta
    if expected is not None:
      for name in expected:
        if name not in infos:
          raise CheckpointError(f"{index_path}: tensor '{name}' is listed in shard {os.path.basename(file)} "
                                f"but that file does not contain it")
    for name, info in infos.items():
      if name in self.tensors and self.tensors[name].file != file:
        raise CheckpointError(f"{file}: tensor '{name}' also appears in {self.tensors[name].file}")
      if expected is None or name in expected:
        self.tensors[name] = info

  def _read_index(self, index_path: str):
    try:
      with open(index_path) as f:
        index = json.load(f)
      weight_map: Mapping[str, str] = index["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
      raise CheckpointError(f"{index_path}: not a valid safetensors index ({e!r})") from None
    by_file: dict[str, set[str]] = {}
    for name, fname in weight_map.items():
      by_file.setdefault(fname, set()).add(name)
    for fname in sorted(by_file):
      file = os.path.join(self.path, fname)
      if not os.path.exists(file):
        example = sorted(by_file[fname])[0]
        raise CheckpointError(f"{index_path}: points at missing file '{fname}' (for {len(by_file[fname])} tensors, "
                              f"e.g. '{example}')")
      self._add_shard(file, by_file[fname], index_path)

  def read(self, name: str) -> np.ndarray:
    return read_tensor(self.tensors[name])

  @property
  def total_bytes(self) -> int:
    return sum(t.nbytes for t in self.tensors.values())

  def shard_sizes(self) -> dict[str, int]:
    return {f: os.path.getsize(f) for f in self.shards}


# ---- writing (tests, synthetic checkpoints) -----------------------------------------------------

def write_safetensors(path: str, tensors: Mapping[str, np.ndarray], metadata: Optional[Mapping[str, str]] = None):
  """Writes tensors (NumPy, incl. ml_dtypes bfloat16) in the safetensors format, in the given order."""
  header: dict[str, Any] = {}
  if metadata:
    header["__metadata__"] = dict(metadata)
  offset = 0
  arrays = []
  for name, a in tensors.items():
    a = np.ascontiguousarray(a)
    dt = _NP_TO_ST.get(a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype)
    if dt is None:
      raise ValueError(f"write_safetensors: tensor '{name}' has unsupported dtype {a.dtype}")
    header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
    offset += a.nbytes
    arrays.append(a)
  raw = json.dumps(header, separators=(",", ":")).encode()
  raw += b" " * ((8 - len(raw) % 8) % 8)
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(raw)))
    f.write(raw)
    for a in arrays:
      f.write(a.tobytes())


def write_index(dir_path: str, weight_map: Mapping[str, str], total_size: int):
  with open(os.path.join(dir_path, INDEX_NAME), "w") as f:
    json.dump({"metadata": {"total_size": int(total_size)}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
