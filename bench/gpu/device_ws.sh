#!/bin/bash
# Issue 6 follow-up 31: one device call for ab_ws.py (the persistent warp-specialised GEMM).
# (device_ab.sh with AB=ab_ws.)
AB=ab_ws exec bash "$(dirname "$0")/device_ab.sh"
