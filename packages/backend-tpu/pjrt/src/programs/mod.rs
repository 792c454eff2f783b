//! The program of each backend capability, for given shapes and dtypes.
