// NF4 decoding shared by the quantized kernels (needs codes, absmax, group_range).
const NF4 = array<f32, 16>(
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0);

fn block_scale(b: u32, double_quant: u32, offset: f32) -> f32 {
    if (double_quant == 0u) { return f32(absmax[b]); }
    let s = offset + (group_range[b / 256u] * (f32(absmax[b]) - 128.0)) / 127.0;
    return clamp(s, 0.0, 3.4028234663852886e38);
}

fn weight_at(i: u32, block_size: u32, double_quant: u32, offset: f32) -> f32 {
    let byte = codes[i / 2u];
    let code = (byte >> (4u * (i % 2u))) & 15u;
    var table = NF4;
    return table[code] * block_scale(i / block_size, double_quant, offset);
}
