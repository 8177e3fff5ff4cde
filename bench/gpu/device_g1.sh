#!/bin/bash
# Issue 6 follow-up 32: one device call for ab_g1.py (one group of 4 k-blocks a warp).
# (device_ab.sh with AB=ab_g1.)
AB=ab_g1 exec bash "$(dirname "$0")/device_ab.sh"
