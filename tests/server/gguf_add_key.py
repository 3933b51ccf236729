#!/usr/bin/env python3
"""gguf_add_key.py IN OUT KEY VALUE: a copy of the GGUF file IN with one more metadata key (a uint32),
written by the GGUF v3 layout (github.com/ggml-org/ggml docs/gguf.md): the header's n_kv + 1, the
key after the others, the tensor infos as they were, the data section re-aligned (tensor offsets
are relative to it, so they stay). Used by test_serve_models.sh for an artifact of a known
architecture with metadata the key table does not describe. Written from the spec, not caldrix."""
import struct
import sys

src, dst, key, value = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
b = open(src, 'rb').read()
assert b[:4] == b'GGUF', 'not a GGUF file'
version, n_tensors, n_kv = struct.unpack_from('<IQQ', b, 4)
assert version == 3, version
pos = 24
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
alignment = 32


def read_str(p):
    n, = struct.unpack_from('<Q', b, p)
    return b[p + 8:p + 8 + n].decode(), p + 8 + n


def skip_value(t, p):
    if t == 8:
        _, p = read_str(p)
        return p
    if t == 9:
        et, n = struct.unpack_from('<IQ', b, p)
        p += 12
        for _ in range(n):
            p = skip_value(et, p)
        return p
    return p + SIZES[t]


for _ in range(n_kv):
    k, p = read_str(pos)
    t, = struct.unpack_from('<I', b, p)
    end = skip_value(t, p + 4)
    if k == 'general.alignment':
        alignment, = struct.unpack_from('<I', b, p + 4)
    pos = end
kv_end = pos
for _ in range(n_tensors):
    _, p = read_str(pos)
    nd, = struct.unpack_from('<I', b, p)
    pos = p + 4 + 8 * nd + 4 + 8
info_end = pos
data_start = (info_end + alignment - 1) // alignment * alignment
kb = key.encode()
new_kv = struct.pack('<Q', len(kb)) + kb + struct.pack('<II', 4, value)
head = b[:4] + struct.pack('<IQQ', version, n_tensors, n_kv + 1) + b[24:kv_end] + new_kv + b[kv_end:info_end]
head += b'\0' * ((-len(head)) % alignment)
open(dst, 'wb').write(head + b[data_start:])
