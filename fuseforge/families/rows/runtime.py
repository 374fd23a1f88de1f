"""Fixed C++ of the row kernels: the row paths and their launch (kernel unit, `ROW_KERNEL_RUNTIME`), and the rows
of a call with each operand checked against its class (binding unit, `ROW_BINDING_RUNTIME`).

Adapted from dev/kernels/rowwise.cu (all its cases, odd sizes included, verified against float64 on an
H100). There the prologue and epilogue were hand-written functors over one input; here each row kernel
is a generated `Op` struct (`kernel.py`) that the templates below call:

    using Stats;                 // the statistics struct (table.ROW_STATS)
    kFull, kOut, kEps            // full-shape inputs (cached per element), full-shape outputs, LayerNorm eps
    const float* full[kFull];    // the full-shape inputs, [rows, cols] contiguous
    float* out[kOut];            // the full-shape outputs, [rows, cols] contiguous
    float reduced(in, row, col)  // prologue: the value the statistics accumulate, from the element's inputs
    Row row_values(st, row, cols, write)  // per-row values once the statistics are final; thread 0
                                 //   of the row writes the per-row outputs (write == true)
    void element(in, st, r, row, col, o)  // epilogue: the full-shape outputs of one element

Paths (chosen from cols; NPT values per thread cached in registers): warp (cols <= 32 * kBig: one warp
per row, 8 rows per 256-thread block, shuffles only), block (cols <= 512 * kBig: one 512-thread block
per row, shuffles then shared memory), two-pass (longer rows, or more than 4 full-shape inputs: the
statistics from a first read, the outputs from a second). kBig is 32 values per thread with one
full-shape input, 16 with two, 8 with three or four: the cache stays at <= 32 floats per thread.
Loads and stores are float4 when cols % 4 == 0 and every full-shape pointer is 16-byte aligned, scalar
otherwise. Rows along the channel axis of [N, C, *S] (softmax(x, 1)) run `ff_row_channels_kernel`
instead: one thread per (n, s), its C values S apart, cached in registers up to 16 channels. Each element's inputs are cached (not the reduced value), so the epilogue can read any of
them; the prologue is recomputed from them in the epilogue where it is needed (registers, no traffic).
"""

from ...cuda_sources import cuda_source

ROW_KERNEL_RUNTIME = cuda_source(__package__, "rows.cu")


# The binding unit: the rows are the reduced axes [lo, hi) of the row shape (see `table.RowReduction.reduced`);
# a broadcast per-row or per-column operand is expanded here, so the kernels read one value per row or column.
ROW_BINDING_RUNTIME = cuda_source(__package__, "rows_binding.h")
