"""Kernels the nvfp4 lit tests compile: the library's TMA block-scaled GEMM (128x4 scales as 5-D TMA tiles) and
the fused NVFP4 linear kernel, with the specs `bwtriton compile FILE.py:KERNEL` reads."""
import importlib

blockscaled = importlib.import_module("bwtriton.kernels.blockscaled")
linear = importlib.import_module("bwtriton.kernels.nvfp4_linear")

block_scaled_matmul_tma_kernel = blockscaled.block_scaled_matmul_tma_kernel
block_scaled_matmul_kernel = blockscaled.block_scaled_matmul_kernel
nvfp4_linear_fused_kernel = linear.nvfp4_linear_fused_kernel

_tma_sig, _tma_const = blockscaled.tma_signature("nvfp4")
_ptr_sig, _ptr_const = blockscaled.pointer_signature("nvfp4")

BWTRITON_SPECS = {
    "block_scaled_matmul_tma_kernel": {"signature": _tma_sig, "constexprs": _tma_const, "num_warps": 4},
    "block_scaled_matmul_kernel": {"signature": _ptr_sig, "constexprs": _ptr_const, "num_warps": 8},
    "nvfp4_linear_fused_kernel": {
        "signature": {"x_ptr": "*bf16", "x_enc_ptr": "*fp32", "w_ptr": "*u8", "ws_ptr": "*fp8e4nv",
                      "w_dec_ptr": "*fp32", "bias_ptr": "*bf16", "out_ptr": "*bf16", "M": "i32", "N": "i32",
                      "K": "i32", "stride_xm": "i32"},
        "constexprs": {"HAS_BIAS": True, "SCALE_BLOCKED": False, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128,
                       "GROUP_M": 8},
        "num_warps": 8},
}
