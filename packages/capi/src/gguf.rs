//! GGUF files (llama.cpp `gpt2` and `llama`).

use std::path::Path;

use crate::error::{Error, Result};
use crate::model::ModelData;

pub fn load(path: &Path) -> Result<ModelData> {
    Err(Error::unsupported(format!("{}: GGUF", path.display())))
}
