"""The capabilities of the cuda backend, one module per family; each decides
which kernel runs with what launch shape and arguments (the kernels are CUDA C
in the driver crate's ``kernels/`` folder, compiled by NVRTC on first use)."""
