#!/bin/bash
# Issue 6 follow-up 29: one device call for ab_grid.py (the `_t2` loop on other grids).
# (device_ab.sh with AB=ab_grid.)
AB=ab_grid exec bash "$(dirname "$0")/device_ab.sh"
