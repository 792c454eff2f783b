//! NF4 quantized weights (backend API 1.4): dequantization and the linear
//! layer with its input gradient.
//!
//! A packed weight `[rows, cols]` (n elements) is `codes` uint8 `[ceil(n/2)]`
//! (element 2j in the low nibble of byte j) and block scales `absmax`
//! `[ceil(n / block_size)]`: float32, or uint8 decoded with `group_range`
//! float32 `[ceil(blocks / 256)]` and `offset` as
//! `clamp(offset + (group_range[b / 256] * (absmax[b] - 128)) / 127, 0, FLT_MAX)`.
//! The weight is decoded inside each program; only the packed form is stored.

use super::linalg::matmul_values;
use super::{expect_elem, start, Input};
use crate::error::Result;
use crate::hlo::{Builder, Program, Scalar, Value};
use crate::invalid;
use crate::types::ElementType::{F32, I64, U8};

/// The 16 NF4 code values (bitsandbytes' table).
pub const NF4_CODEBOOK: [f32; 16] = [
    -1.0,
    -0.696_192_8,
    -0.525_073_05,
    -0.394_917_5,
    -0.284_441_38,
    -0.184_773_43,
    -0.091_050_036,
    0.0,
    0.079_580_3,
    0.160_930_2,
    0.246_112_3,
    0.337_915_24,
    0.440_709_83,
    0.562_617,
    0.722_956_84,
    1.0,
];

/// Blocks per double-quantization group.
pub const SCALE_GROUP: i64 = 256;

/// The layout of one packed weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    pub rows: i64,
    pub cols: i64,
    pub block_size: i64,
    pub double_quant: bool,
}

impl Packing {
    fn count(&self) -> i64 {
        self.rows * self.cols
    }

    fn blocks(&self) -> i64 {
        (self.count() + self.block_size - 1) / self.block_size
    }
}

/// Check the packed operands against `w_shape` and `block_size`.
pub fn check_packing(
    op: &str,
    codes: &Input,
    absmax: &Input,
    group_range: Option<&Input>,
    w_shape: &[i64],
    block_size: i64,
) -> Result<Packing> {
    if w_shape.len() != 2 || w_shape.iter().any(|&d| d < 0) || block_size < 1 {
        return invalid!("{op}: weight shape {w_shape:?} with blocks of {block_size}");
    }
    let p = Packing {
        rows: w_shape[0],
        cols: w_shape[1],
        block_size,
        double_quant: group_range.is_some(),
    };
    expect_elem(op, "codes", codes, &[U8])?;
    if codes.count() != (p.count() + 1) / 2 || absmax.count() != p.blocks() {
        return invalid!(
            "{op}: {} code bytes and {} scales for a {w_shape:?} weight in blocks of {block_size}",
            codes.count(),
            absmax.count()
        );
    }
    match group_range {
        Some(g) => {
            expect_elem(op, "absmax", absmax, &[U8])?;
            expect_elem(op, "group_range", g, &[F32])?;
            if g.count() != (p.blocks() + SCALE_GROUP - 1) / SCALE_GROUP {
                return invalid!("{op}: {} group ranges for {} blocks", g.count(), p.blocks());
            }
        }
        None => expect_elem(op, "absmax", absmax, &[F32])?,
    }
    Ok(p)
}

/// Block scales `[blocks]` as float32, decoding double-quantized bytes with
/// `decode = [offset, 128, 127]`. Those numbers arrive as an input, not as
/// constants, so the compiler cannot turn the division into a multiplication
/// by a rounded reciprocal: the decoded scales match the float32 formula exactly.
fn scales(
    b: &mut Builder,
    absmax: &Value,
    double: Option<(&Value, &Value)>,
    p: Packing,
) -> Result<Value> {
    let Some((ranges, decode)) = double else {
        return Ok(absmax.clone());
    };
    let blocks = p.blocks();
    let at = |b: &mut Builder, i: i64| -> Result<Value> {
        let one = b.slice(decode, &[i], &[i + 1], &[1])?;
        let one = b.reshape(&one, &[])?;
        b.broadcast_in_dim(&one, &[], &[blocks])
    };
    let q = b.convert(absmax, F32)?;
    let mid = at(b, 1)?;
    let q = b.sub(&q, &mid)?;
    let groups = ranges.dims()[0];
    let spread = b.broadcast_in_dim(ranges, &[0], &[groups, SCALE_GROUP])?;
    let spread = b.reshape(&spread, &[groups * SCALE_GROUP])?;
    let t = b.narrow(&spread, 0, 0, blocks)?;
    let tq = b.mul(&t, &q)?;
    let denom = at(b, 2)?;
    let frac = b.div(&tq, &denom)?;
    let off = at(b, 0)?;
    let s = b.add(&off, &frac)?;
    let zero = b.splat(Scalar::F(0.0), F32, &[blocks])?;
    let top = b.splat(Scalar::F(f32::MAX as f64), F32, &[blocks])?;
    let s = b.nan_min_max("stablehlo.maximum", &s, &zero)?;
    b.nan_min_max("stablehlo.minimum", &s, &top)
}

/// The `decode` input of a double-quantized weight: `[offset, 128, 127]`.
pub fn decode_constants(offset: f64) -> [f32; 3] {
    [offset as f32, 128.0, 127.0]
}

/// The float32 weight `[rows, cols]`.
fn weight(
    b: &mut Builder,
    codes: &Value,
    absmax: &Value,
    double: Option<(&Value, &Value)>,
    p: Packing,
) -> Result<Value> {
    let n = p.count();
    let bytes = codes.dims()[0];
    let mask = b.splat(Scalar::I(15), U8, &[bytes])?;
    let four = b.splat(Scalar::I(4), U8, &[bytes])?;
    let low = b.binary("stablehlo.and", codes, &mask)?;
    let high = b.binary("stablehlo.shift_right_logical", codes, &four)?;
    let low = b.reshape(&low, &[bytes, 1])?;
    let high = b.reshape(&high, &[bytes, 1])?;
    let pairs = b.concatenate(&[low, high], 1)?;
    let index = b.reshape(&pairs, &[bytes * 2])?;
    let index = b.narrow(&index, 0, 0, n)?;
    let index = b.convert(&index, I64)?;
    let book: Vec<f64> = NF4_CODEBOOK.iter().map(|&c| c as f64).collect();
    let book = b.vector_f32(&book)?;
    let values = b.take(&book, &index, 0)?;
    let s = scales(b, absmax, double, p)?;
    let blocks = p.blocks();
    let s = b.broadcast_in_dim(&s, &[0], &[blocks, p.block_size])?;
    let s = b.reshape(&s, &[blocks * p.block_size])?;
    let s = b.narrow(&s, 0, 0, n)?;
    let w = b.mul(&values, &s)?;
    b.reshape(&w, &[p.rows, p.cols])
}

/// The packed operands in program order: codes, absmax, then for a
/// double-quantized weight group_range and the `decode` constants.
pub struct Packed<'a> {
    pub codes: &'a Input,
    pub absmax: &'a Input,
    pub double: Option<(&'a Input, &'a Input)>,
}

impl<'a> Packed<'a> {
    fn inputs(&self) -> Vec<&'a Input> {
        let mut inputs = vec![self.codes, self.absmax];
        if let Some((ranges, decode)) = self.double {
            inputs.extend([ranges, decode]);
        }
        inputs
    }

    fn check(&self, op: &str, w_shape: &[i64], block_size: i64) -> Result<Packing> {
        if let Some((_, decode)) = self.double {
            expect_elem(op, "the decode constants", decode, &[F32])?;
            if decode.shape != [3] {
                return invalid!("{op}: decode constants {:?}", decode.shape);
            }
        }
        check_packing(
            op,
            self.codes,
            self.absmax,
            self.double.map(|d| d.0),
            w_shape,
            block_size,
        )
    }

    /// The weight from program values laid out as [`Packed::inputs`] from `first`.
    fn weight(&self, b: &mut Builder, v: &[Value], first: usize, p: Packing) -> Result<Value> {
        let double = self.double.map(|_| (&v[first + 2], &v[first + 3]));
        weight(b, &v[first], &v[first + 1], double, p)
    }

    fn len(&self) -> usize {
        if self.double.is_some() {
            4
        } else {
            2
        }
    }
}

pub fn nf4_dequantize(packed: &Packed<'_>, w_shape: &[i64], block_size: i64) -> Result<Program> {
    let p = packed.check("nf4_dequantize", w_shape, block_size)?;
    let (mut b, v) = start(&packed.inputs())?;
    let w = packed.weight(&mut b, &v, 0, p)?;
    Ok(b.finish(&[w]))
}

/// `x [..., cols] @ W^T (+ bias [rows])`; inputs x, the packed operands, bias.
pub fn nf4_linear(
    x: &Input,
    packed: &Packed<'_>,
    w_shape: &[i64],
    block_size: i64,
    bias: Option<&Input>,
) -> Result<Program> {
    let p = packed.check("nf4_linear", w_shape, block_size)?;
    expect_elem("nf4_linear", "x", x, &[F32])?;
    if x.rank() == 0 || x.shape[x.rank() - 1] != p.cols {
        return invalid!("nf4_linear: x {:?} for a weight {w_shape:?}", x.shape);
    }
    if let Some(bias) = bias {
        expect_elem("nf4_linear", "bias", bias, &[F32])?;
        if bias.shape != [p.rows] {
            return invalid!("nf4_linear: bias {:?} for a weight {w_shape:?}", bias.shape);
        }
    }
    let mut inputs = vec![x];
    inputs.extend(packed.inputs());
    inputs.extend(bias);
    let (mut b, v) = start(&inputs)?;
    let w = packed.weight(&mut b, &v, 1, p)?;
    let lead = &x.shape[..x.rank() - 1];
    let rows_x: i64 = lead.iter().product();
    let flat = b.reshape(&v[0], &[rows_x, p.cols])?;
    let y = matmul_values(&mut b, &flat, &w, false, true)?;
    let mut out_dims = lead.to_vec();
    out_dims.push(p.rows);
    let mut y = b.reshape(&y, &out_dims)?;
    if bias.is_some() {
        let bb = b.broadcast_to(&v[1 + packed.len()], &out_dims)?;
        y = b.add(&y, &bb)?;
    }
    Ok(b.finish(&[y]))
}

/// `dy [..., rows] @ W` -> `[..., cols]`; inputs dy, then the packed operands.
pub fn nf4_linear_backward(
    dy: &Input,
    packed: &Packed<'_>,
    w_shape: &[i64],
    block_size: i64,
) -> Result<Program> {
    let p = packed.check("nf4_linear_backward", w_shape, block_size)?;
    expect_elem("nf4_linear_backward", "dy", dy, &[F32])?;
    if dy.rank() == 0 || dy.shape[dy.rank() - 1] != p.rows {
        return invalid!(
            "nf4_linear_backward: dy {:?} for a weight {w_shape:?}",
            dy.shape
        );
    }
    let mut inputs = vec![dy];
    inputs.extend(packed.inputs());
    let (mut b, v) = start(&inputs)?;
    let w = packed.weight(&mut b, &v, 1, p)?;
    let lead = &dy.shape[..dy.rank() - 1];
    let rows_y: i64 = lead.iter().product();
    let flat = b.reshape(&v[0], &[rows_y, p.rows])?;
    let dx = matmul_values(&mut b, &flat, &w, false, false)?;
    let mut out_dims = lead.to_vec();
    out_dims.push(p.cols);
    let dx = b.reshape(&dx, &out_dims)?;
    Ok(b.finish(&[dx]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::f32s;
    use super::*;

    fn bytes(n: i64) -> Input {
        Input::dense(&[n], U8)
    }

    fn plain<'a>(codes: &'a Input, absmax: &'a Input) -> Packed<'a> {
        Packed {
            codes,
            absmax,
            double: None,
        }
    }

    #[test]
    fn packed_sizes_are_checked() {
        // 6 x 5 = 30 elements: 15 code bytes, 4 blocks of 8
        let (codes, scales) = (bytes(15), f32s(&[4]));
        assert!(nf4_dequantize(&plain(&codes, &scales), &[6, 5], 8).is_ok());
        assert!(nf4_dequantize(&plain(&bytes(14), &scales), &[6, 5], 8).is_err());
        let (q, ranges, decode) = (bytes(4), f32s(&[1]), f32s(&[3]));
        let double = Packed {
            codes: &codes,
            absmax: &q,
            double: Some((&ranges, &decode)),
        };
        assert!(nf4_dequantize(&double, &[6, 5], 8).is_ok());
        let wrong = Packed {
            codes: &codes,
            absmax: &scales,
            double: Some((&ranges, &decode)),
        };
        assert!(nf4_dequantize(&wrong, &[6, 5], 8).is_err());
    }

    #[test]
    fn linear_shapes() {
        let (codes, scales) = (bytes(15), f32s(&[4]));
        let p = nf4_linear(
            &f32s(&[2, 3, 5]),
            &plain(&codes, &scales),
            &[6, 5],
            8,
            Some(&f32s(&[6])),
        )
        .unwrap();
        assert_eq!(p.results[0].dims, [2, 3, 6]);
        let p =
            nf4_linear_backward(&f32s(&[2, 3, 6]), &plain(&codes, &scales), &[6, 5], 8).unwrap();
        assert_eq!(p.results[0].dims, [2, 3, 5]);
    }

    #[test]
    fn the_codebook_is_the_published_table() {
        assert_eq!(NF4_CODEBOOK[1], -0.696_192_8_f32);
        assert!(NF4_CODEBOOK.windows(2).all(|w| w[0] < w[1]));
    }
}
