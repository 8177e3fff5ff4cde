"""Prints the path of libonnxruntime.so inside the installed `onnxruntime` wheel."""
import glob
import os

import onnxruntime

capi = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
libs = sorted(glob.glob(os.path.join(capi, "libonnxruntime.so*")))
if not libs:
    raise SystemExit(f"no libonnxruntime.so in {capi}")
print(libs[0])
