//! `Storage`: a device buffer read under a tensor shape, and numpy transfers.

use std::sync::{Arc, Mutex};

use numpy::{
    PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use riftco_pjrt::programs::Input;
use riftco_pjrt::{Buffer, ElementType, TensorType};

use crate::{detached, error, Device};

/// The storage handle of the tpu backend. Reshapes share the `cell`, so an
/// in-place `assign` (which swaps the buffer in the cell) is seen through
/// every view, as with numpy views on the CPU backend.
#[pyclass(frozen, module = "riftco.backends.tpu._native")]
pub struct Storage {
    cell: Arc<Mutex<Arc<Buffer>>>,
    shape: Vec<i64>,
    elem: ElementType,
}

impl Storage {
    /// A storage owning `buffer`, read under the buffer's own dims.
    pub fn new(buffer: Arc<Buffer>) -> Storage {
        let ty = buffer.ty().clone();
        Storage {
            cell: Arc::new(Mutex::new(buffer)),
            shape: ty.dims,
            elem: ty.elem,
        }
    }

    pub fn buffer(&self) -> Arc<Buffer> {
        self.cell.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_buffer(&self, buffer: Arc<Buffer>) {
        *self.cell.lock().unwrap_or_else(|p| p.into_inner()) = buffer;
    }

    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    pub fn elem(&self) -> ElementType {
        self.elem
    }

    /// How programs see this operand.
    pub fn input(&self) -> Input {
        Input {
            physical: self.buffer().ty().clone(),
            shape: self.shape.clone(),
        }
    }

    /// The same cell under another shape of equal size.
    pub fn view(&self, shape: Vec<i64>) -> PyResult<Storage> {
        let count: i64 = shape.iter().product();
        if shape.iter().any(|&d| d < 0) || count != self.shape.iter().product::<i64>() {
            return Err(error(format!(
                "reshape: {:?} cannot be read as {shape:?}",
                self.shape
            )));
        }
        Ok(Storage {
            cell: self.cell.clone(),
            shape,
            elem: self.elem,
        })
    }
}

#[pymethods]
impl Storage {
    #[getter(shape)]
    fn py_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.elem.name()
    }

    /// The dims of the device buffer behind this storage.
    #[getter]
    fn buffer_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.buffer().ty().dims)
    }

    fn __repr__(&self) -> String {
        format!("Storage({:?}, {})", self.shape, self.elem.name())
    }
}

fn elem_of(array: &Bound<'_, PyUntypedArray>) -> PyResult<ElementType> {
    let py = array.py();
    let d = array.dtype();
    for (elem, probe) in [
        (ElementType::F32, numpy::dtype::<f32>(py)),
        (ElementType::I64, numpy::dtype::<i64>(py)),
        (ElementType::Bool, numpy::dtype::<bool>(py)),
        (ElementType::U8, numpy::dtype::<u8>(py)),
    ] {
        if d.is_equiv_to(&probe) {
            return Ok(elem);
        }
    }
    Err(error(format!(
        "tpu: arrays of dtype {d} are not supported on tpu"
    )))
}

fn bytes_of<'a, T: numpy::Element>(array: &'a Bound<'_, PyUntypedArray>) -> PyResult<&'a [u8]> {
    let typed = array
        .cast::<PyArrayDyn<T>>()
        .map_err(|_| error("array dtype disagrees"))?;
    // SAFETY: the backend passes private C-contiguous arrays nothing mutates during the call.
    let values =
        unsafe { typed.as_slice() }.map_err(|_| error("from_numpy: array is not C-contiguous"))?;
    // SAFETY: plain-old-data elements viewed as their bytes.
    Ok(unsafe {
        std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values))
    })
}

/// Copy a C-contiguous numpy array to the device.
#[pyfunction]
pub fn from_numpy(
    py: Python<'_>,
    device: &Bound<'_, Device>,
    array: &Bound<'_, PyUntypedArray>,
) -> PyResult<Storage> {
    let elem = elem_of(array)?;
    let dims: Vec<i64> = array.shape().iter().map(|&d| d as i64).collect();
    let data = match elem {
        ElementType::F32 => bytes_of::<f32>(array)?,
        ElementType::I64 => bytes_of::<i64>(array)?,
        ElementType::Bool => bytes_of::<bool>(array)?,
        _ => bytes_of::<u8>(array)?,
    };
    let runtime = device.get().runtime();
    let ty = TensorType::new(&dims, elem);
    let buffer = detached(py, || runtime.upload(data, &ty))?;
    Ok(Storage::new(Arc::new(buffer)))
}

fn download<'py, T: numpy::Element + Default + Clone + Send>(
    py: Python<'py>,
    buffer: Arc<Buffer>,
    shape: &[i64],
) -> PyResult<Bound<'py, PyAny>> {
    let count = buffer.ty().count() as usize;
    let values = detached(py, move || {
        let mut values = vec![T::default(); count];
        // SAFETY: the plugin writes exactly count * size_of::<T>() bytes of valid
        // elements (PJRT predicates are 0 or 1, valid bools).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                values.as_mut_ptr() as *mut u8,
                std::mem::size_of_val(values.as_slice()),
            )
        };
        buffer.to_host(bytes)?;
        Ok(values)
    })?;
    // numpy's own reshape: it keeps a 0-d shape 0-d.
    let dims = PyTuple::new(py, shape)?;
    numpy::PyArray1::from_vec(py, values)
        .into_any()
        .call_method1("reshape", (dims,))
}

/// The values as a new numpy array (waits for the computation that makes them).
#[pyfunction]
pub fn to_numpy<'py>(py: Python<'py>, x: &Bound<'py, Storage>) -> PyResult<Bound<'py, PyAny>> {
    let s = x.get();
    let buffer = s.buffer();
    match s.elem {
        ElementType::F32 => download::<f32>(py, buffer, &s.shape),
        ElementType::I64 => download::<i64>(py, buffer, &s.shape),
        ElementType::Bool => download::<bool>(py, buffer, &s.shape),
        ElementType::U8 => download::<u8>(py, buffer, &s.shape),
        e => Err(error(format!("to_numpy: {} storage", e.name()))),
    }
}

/// Read a small int64 storage into a Vec (for checks).
pub fn read_i64s(py: Python<'_>, buffer: Arc<Buffer>) -> PyResult<Vec<i64>> {
    let count = buffer.ty().count() as usize;
    detached(py, move || {
        let mut bytes = vec![0u8; count * 8];
        buffer.to_host(&mut bytes)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
            .collect())
    })
}

/// Read bool scalars (flags) back from the device.
pub fn read_bools(py: Python<'_>, buffers: Vec<Arc<Buffer>>) -> PyResult<Vec<bool>> {
    detached(py, move || {
        buffers
            .iter()
            .map(|b| {
                let mut byte = [0u8; 1];
                b.to_host(&mut byte)?;
                Ok(byte[0] != 0)
            })
            .collect()
    })
}
