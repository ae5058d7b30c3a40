#!/usr/bin/python3
"""Writes the fuzzers' seed corpora: corpus/npy (NumPy's own files of each dtype, layout and format
version, and a few broken ones) and corpus/csv (the house table in each supported form, and a few
broken ones). Run from anywhere; the files are committed, so this only documents and refreshes them."""
import io
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
H = np.array([[1200, 2.0, 45], [1500, 3.0, 70], [2000, 3.5, 80]])


def npy(arr, version=None):
    f = io.BytesIO()
    if version is None:
        np.save(f, arr)
    else:
        np.lib.format.write_array(f, arr, version=version)
    return f.getvalue()


npy_seeds = {
    "f8_2d": npy(H), "f4_2d": npy(H.astype(np.float32)), "i4_1d": npy(np.array([3, 5, 2, 6], np.int32)),
    "i8_2d": npy(np.array([[1, -2], [3, 4]], np.int64)), "f8_1d_v2": npy(H[0], (2, 0)),
    "f8_1d_v3": npy(H[0], (3, 0)), "scalar": npy(np.float64(1.5)), "empty": npy(np.zeros((0, 3))),
    "fortran": npy(np.asfortranarray(H)), "bigendian": npy(H.astype(">f8")), "f2": npy(H.astype(np.float16)),
    "nan_inf": npy(np.array([np.nan, np.inf, -np.inf, -0.0])), "truncated": npy(H)[:-7],
    "bad_magic": b"\x93NUMPZ\x01\x00" + npy(H)[8:],
}
csv_seeds = {
    "house_header": "size,rooms,price\n1200,2,45\n1500,3,70\n2000,3.5,80\n",
    "house_semicolon_crlf": "1200;2;45\r\n1500;3;70\r\n2000;3.5;80\r\n",
    "house_whitespace": "size rooms price\n1200  2\t45\n1500 3 70\n  2000 3.5 80\n",
    "quoted": "\"size, sq ft\",\"say \"\"hi\"\"\",\"\"\n\"1200\",+2,-4.5e1\n",
    "comments_bom": "\xef\xbb\xbf# size,rooms\n\n1,2\n# note\n3,4\n",
    "special": "nan,inf,-Infinity\n1e-320,1e308,.5\n",
    "bad_token": "1,2\n3,abc\n",
    "ragged": "1,2,3\n4,5\n",
    "empty_field": "1,,3\n",
    # Found by fuzz_csv: a name starting with a byte order mark must be written quoted.
    "regress_bom_name": "\xef\xbb\xbf# size,rooms\n\xef\xbb\xbf#\xfe\xff\xff5e,rooms\n\n1,2\n#te\n3,4\n",
}
for name, data in npy_seeds.items():
    with open(os.path.join(HERE, "corpus", "npy", name + ".npy"), "wb") as f:
        f.write(data)
for name, text in csv_seeds.items():
    with open(os.path.join(HERE, "corpus", "csv", name + ".csv"), "wb") as f:
        f.write(text.encode("latin1"))
