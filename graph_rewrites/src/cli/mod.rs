//! Helpers of the `mxfuse` CLI.
