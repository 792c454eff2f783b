//! Gathers and scatters.

use super::{array, list, zero, Builder, Value};
use crate::error::Result;
use crate::invalid;
use crate::types::{ElementType, TensorType};

impl Builder {
    // ---- indexing ------------------------------------------------------------------

    /// Gather single elements: `indices` is `[..., rank(x)]` of i64 coordinates
    /// (each in range), the result has `indices`' leading shape.
    pub fn gather_points(&mut self, x: &Value, indices: &Value) -> Result<Value> {
        let r = x.rank() as i64;
        let Some((&last, lead)) = indices.dims().split_last() else {
            return invalid!("gather: indices {} have no coordinate axis", indices.ty);
        };
        if last != r || indices.elem() != ElementType::I64 {
            return invalid!("gather: indices {} for an operand {}", indices.ty, x.ty);
        }
        if x.ty.count() == 0 && indices.ty.count() != 0 {
            return invalid!("gather: indices into an empty operand {}", x.ty);
        }
        let all: Vec<i64> = (0..r).collect();
        let attrs = format!(
            "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = {}, start_index_map = {}, \
             index_vector_dim = {}>, indices_are_sorted = false, slice_sizes = {}",
            list(&all),
            list(&all),
            lead.len(),
            array(&vec![1; r as usize])
        );
        Ok(self.one(
            "stablehlo.gather",
            &[x, indices],
            &attrs,
            TensorType::new(lead, x.elem()),
        ))
    }

    /// `x.take(indices, axis)` for 1-D i64 `indices` (each in range).
    pub fn take(&mut self, x: &Value, indices: &Value, axis: usize) -> Result<Value> {
        if axis >= x.rank() || indices.rank() != 1 || indices.elem() != ElementType::I64 {
            return invalid!("take: {} along axis {axis} at {}", x.ty, indices.ty);
        }
        let count = indices.dims()[0];
        if x.dims()[axis] == 0 && count != 0 {
            return invalid!("take: indices into an empty axis of {}", x.ty);
        }
        let mut dims = x.dims().to_vec();
        dims[axis] = count;
        if count == 0 || x.ty.count() == 0 {
            return self.splat(zero(x.elem()), x.elem(), &dims);
        }
        let column = self.reshape(indices, &[count, 1])?;
        let offset: Vec<i64> = (0..x.rank() as i64).filter(|&d| d != axis as i64).collect();
        let mut sizes = x.dims().to_vec();
        sizes[axis] = 1;
        let attrs = format!(
            "dimension_numbers = #stablehlo.gather<offset_dims = {}, collapsed_slice_dims = [{axis}], \
             start_index_map = [{axis}], index_vector_dim = 1>, indices_are_sorted = false, \
             slice_sizes = {}",
            list(&offset),
            array(&sizes)
        );
        // The offset dims fill every result position but `axis`, where the indices go.
        Ok(self.one(
            "stablehlo.gather",
            &[x, &column],
            &attrs,
            TensorType::new(&dims, x.elem()),
        ))
    }

    /// `base` with `updates` added at single-element coordinates `indices`
    /// (`[..., rank(base)]`, each in range; `updates` has the leading shape).
    pub fn scatter_add_points(
        &mut self,
        base: &Value,
        indices: &Value,
        updates: &Value,
    ) -> Result<Value> {
        let r = base.rank() as i64;
        let Some((&last, lead)) = indices.dims().split_last() else {
            return invalid!("scatter: indices {} have no coordinate axis", indices.ty);
        };
        if last != r
            || lead != updates.dims()
            || updates.elem() != base.elem()
            || indices.elem() != ElementType::I64
        {
            return invalid!(
                "scatter: {} at {} with updates {}",
                base.ty,
                indices.ty,
                updates.ty
            );
        }
        if updates.ty.count() == 0 {
            return Ok(base.clone());
        }
        let all: Vec<i64> = (0..r).collect();
        let attrs = format!(
            "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<\
             inserted_window_dims = {}, scatter_dims_to_operand_dims = {}, index_vector_dim = {}>, \
             unique_indices = false",
            list(&all),
            list(&all),
            lead.len()
        );
        self.scatter(base, indices, updates, &attrs)
    }

    /// `base` plus `updates` slices added at `indices` along `axis` (index_add).
    pub fn index_add(
        &mut self,
        base: &Value,
        indices: &Value,
        updates: &Value,
        axis: usize,
    ) -> Result<Value> {
        if axis >= base.rank() || indices.rank() != 1 || indices.elem() != ElementType::I64 {
            return invalid!("index_add: {} along axis {axis} at {}", base.ty, indices.ty);
        }
        let count = indices.dims()[0];
        let mut want = base.dims().to_vec();
        want[axis] = count;
        if updates.dims() != want || updates.elem() != base.elem() {
            return invalid!(
                "index_add: updates {} for {} at {}",
                updates.ty,
                base.ty,
                indices.ty
            );
        }
        if updates.ty.count() == 0 {
            return Ok(base.clone());
        }
        let column = self.reshape(indices, &[count, 1])?;
        let window: Vec<i64> = (0..base.rank() as i64)
            .filter(|&d| d != axis as i64)
            .collect();
        let attrs = format!(
            "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<\
             update_window_dims = {}, inserted_window_dims = [{axis}], \
             scatter_dims_to_operand_dims = [{axis}], index_vector_dim = 1>, unique_indices = false",
            list(&window)
        );
        self.scatter(base, &column, updates, &attrs)
    }

    /// `base` with rows `rows[i]` (axis 0, 1-D i64) replaced by `updates[i]`;
    /// out-of-range rows are skipped (XLA's scatter semantics).
    pub fn replace_rows(&mut self, base: &Value, rows: &Value, updates: &Value) -> Result<Value> {
        if base.rank() == 0 || rows.rank() != 1 || rows.elem() != ElementType::I64 {
            return invalid!("replace_rows: {} at {}", base.ty, rows.ty);
        }
        let n = rows.dims()[0];
        let mut want = base.dims().to_vec();
        want[0] = n;
        if updates.dims() != want || updates.elem() != base.elem() {
            return invalid!(
                "replace_rows: updates {} for {} at {}",
                updates.ty,
                base.ty,
                rows.ty
            );
        }
        if n == 0 || base.ty.count() == 0 {
            return Ok(base.clone());
        }
        let column = self.reshape(rows, &[n, 1])?;
        let window: Vec<i64> = (1..base.rank() as i64).collect();
        let attrs = format!(
            "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<\
             update_window_dims = {}, inserted_window_dims = [0], \
             scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false",
            list(&window)
        );
        let scalar = TensorType::scalar(base.elem());
        let region = self.region(&[scalar.clone(), scalar], |_, args| {
            Ok(vec![args[1].clone()])
        })?;
        Ok(self
            .op(
                "stablehlo.scatter",
                &[base, &column, updates],
                Some(region),
                &attrs,
                std::slice::from_ref(&base.ty),
            )
            .remove(0))
    }

    fn scatter(
        &mut self,
        base: &Value,
        indices: &Value,
        updates: &Value,
        attrs: &str,
    ) -> Result<Value> {
        let scalar = TensorType::scalar(base.elem());
        let region = self.region(&[scalar.clone(), scalar], |b, args| {
            Ok(vec![b.add(&args[0], &args[1])?])
        })?;
        Ok(self
            .op(
                "stablehlo.scatter",
                &[base, indices, updates],
                Some(region),
                attrs,
                std::slice::from_ref(&base.ty),
            )
            .remove(0))
    }
}
