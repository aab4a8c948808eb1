#!/usr/bin/env python3
"""Patch a llama.cpp source tree so CUDA verify rows round like one-row decodes, when asked.

Greedy speculative decoding is token-identical to the target alone only if the target's logits for
a token do not depend on how many rows its batch had. On the CPU, ggufspec's exact kernels
(scripts/build_exact_kernels.sh) make every batch size take one kernel. On CUDA, llama.cpp
(llama-cpp-python 0.3.36's vendored copy) picks kernels by the batch's row count:

- quantized weights: mul_mat_vec_q for 1-8 rows, whose thread layout (warps a block) depends on the
  column count (on NVIDIA from Ampere on: 4 warps for 1-4 columns, 2 for 5-8), then mul_mat_q for
  more rows (tensor cores, stream-k); each splits a dot product's sum differently;
- flash attention: the one-row "vec" kernel for one query row (f16 cache, Ada and later), the
  tensor-core kernel for more;
- fused kernels (matrix-vector product with its GLU) only for one row.

With `GGUFSPEC_CUDA_ROW_INVARIANT=1` in the environment, the patched library runs a quantized product
of 2-16 columns as chunks of the columns whose mul_mat_vec_q kernel has the one-column kernel's
thread layout (4 on those GPUs; 1 where no other has it), and a flash attention of 2-16 query rows
one row at a time through the one-row kernel. Each column is then computed by the very
instructions of a one-row decode. Set `GGML_CUDA_DISABLE_FUSION=1` beside it so one-row decodes do
not take the fused kernels either. Unset, the library behaves as the stock one (one branch on a
cached flag). Costs: chunks re-read the weights (a 9-row verify reads them 3 times), and each query
row of the attention is its own launch; scripts/device/check.sh measures both.

    python scripts/device/row_invariant.py LLAMA_CPP_DIR   # idempotent; exits 1 if an anchor is missing
"""

from __future__ import annotations

import sys
from pathlib import Path

MARK = "ggufspec row-invariant"

FLAG = f"""
// {MARK}: GGUFSPEC_CUDA_ROW_INVARIANT=1 (read once)
static bool ggufspec_row_invariant() {{
    static const bool on = getenv("GGUFSPEC_CUDA_ROW_INVARIANT") != nullptr && atoi(getenv("GGUFSPEC_CUDA_ROW_INVARIANT")) != 0;
    return on;
}}
"""

# (file, anchor, text inserted before the anchor, text inserted after it)
EDITS: list[tuple[str, str, str, str]] = [
    (
        "ggml/src/ggml-cuda/mmvq.cuh",
        "bool ggml_cuda_should_use_mmvq(enum ggml_type type, int cc, int64_t ne11);",
        "",
        f"\n\n// {MARK}: most columns whose kernel splits each dot product as the one-column kernel does\n"
        "int ggml_cuda_mmvq_row_invariant_cols(enum ggml_type type, int cc);",
    ),
    (
        "ggml/src/ggml-cuda/mmvq.cu",
        "void ggml_cuda_mul_mat_vec_q(\n",
        f"""// {MARK}: the same warps a block as one column (the rows a block only regroup whole dot
// products); GB10 may double one column's warps at run time, so one column at a time there
int ggml_cuda_mmvq_row_invariant_cols(enum ggml_type type, int cc) {{
    const mmvq_parameter_table_id table_id = get_device_table_id(cc);
    if (table_id == MMVQ_PARAMETERS_GB10) {{
        return 1;
    }}
    const int nwarps_one = calc_nwarps(type, 1, table_id);
    int n = 1;
    while (n < MMVQ_MAX_BATCH_SIZE && calc_nwarps(type, n + 1, table_id) == nwarps_one) {{
        ++n;
    }}
    return n;
}}

""",
        "",
    ),
    (
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        "static void ggml_cuda_mul_mat(ggml_backend_cuda_context & ctx, const ggml_tensor * src0, const ggml_tensor * src1, ggml_tensor * dst) {",
        FLAG + "\n",
        "",
    ),
    (
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        """        ggml_cuda_mul_mat_cublas(ctx, src0, src1, dst);
        return;
    }

    const int cc        = ggml_cuda_info().devices[ctx.device].cc;
    const int warp_size = ggml_cuda_info().devices[ctx.device].warp_size;
""",
        "",
        f"""
    // {MARK}: 2-16 columns of a quantized product as chunks through the one-column kernel's layout
    if (ggufspec_row_invariant() && ggml_is_quantized(src0->type) && ne11 > 1 && ne11 <= 16 && ne12 == 1 && ne13 == 1
            && ggml_cuda_should_use_mmvq(src0->type, cc, 1)) {{
        const int64_t chunk = ggml_cuda_mmvq_row_invariant_cols(src0->type, cc);
        for (int64_t j0 = 0; j0 < ne11; j0 += chunk) {{
            ggml_tensor src1_j = *src1;
            ggml_tensor dst_j  = *dst;
            src1_j.ne[1] = dst_j.ne[1] = std::min<int64_t>(chunk, ne11 - j0);
            src1_j.data  = (char *) src1->data + j0*src1->nb[1];
            dst_j.data   = (char *) dst->data  + j0*dst->nb[1];
            ggml_cuda_mul_mat_vec_q(ctx, src0, &src1_j, nullptr, &dst_j, nullptr);
        }}
        return;
    }}
""",
    ),
    (
        "ggml/src/ggml-cuda/fattn.cu",
        "void ggml_cuda_flash_attn_ext(ggml_backend_cuda_context & ctx, ggml_tensor * dst) {",
        FLAG + "\n",
        f"""
    if (ggufspec_row_invariant() && dst->src[0]->ne[1] > 1 && dst->src[0]->ne[1] <= 16 && dst->src[0]->ne[3] == 1) {{
        // {MARK}: each query row alone, where one row takes the one-row kernel (its KV split too)
        const ggml_tensor * Q    = dst->src[0];
        const ggml_tensor * mask = dst->src[3];
        ggml_tensor Q_j = *Q;
        ggml_tensor mask_j{{}};
        ggml_tensor dst_j = *dst;
        Q_j.ne[1]      = 1;
        dst_j.ne[2]    = 1;  // dst: [D, heads, rows, 1]
        dst_j.src[0]   = &Q_j;
        if (mask) {{
            mask_j       = *mask;
            mask_j.ne[1] = 1;
            dst_j.src[3] = &mask_j;
        }}
        ggml_cuda_set_device(ctx.device);
        if (ggml_cuda_get_best_fattn_kernel(ggml_cuda_get_device(), &dst_j) == BEST_FATTN_KERNEL_VEC) {{
            for (int64_t j = 0; j < Q->ne[1]; ++j) {{
                Q_j.data   = (char *) Q->data   + j*Q->nb[1];
                dst_j.data = (char *) dst->data + j*dst->nb[2];
                if (mask) {{
                    mask_j.data = (char *) mask->data + j*mask->nb[1];
                }}
                ggml_cuda_flash_attn_ext_vec(ctx, &dst_j);
            }}
            return;
        }}
    }}
""",
    ),
]


def patch(root: Path) -> int:
    """Apply EDITS under root; 0 when done (or already done), 1 when an anchor is missing."""
    texts = {rel: (root / rel).read_text() for rel, *_ in EDITS}
    done = {rel for rel, text in texts.items() if MARK in text}
    for rel, anchor, before, after in EDITS:
        if rel in done:
            continue
        if texts[rel].count(anchor) != 1:
            print(f"error: {rel}: anchor found {texts[rel].count(anchor)} times: {anchor.splitlines()[0]!r}",
                  file=sys.stderr)
            return 1
        texts[rel] = texts[rel].replace(anchor, before + anchor + after)
    for rel, text in texts.items():
        if rel in done:
            print(f"{rel}: already patched")
            continue
        tmp = root / (rel + ".tmp")
        tmp.write_text(text)
        tmp.replace(root / rel)
        print(f"{rel}: patched")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(patch(Path(sys.argv[1])))
