"""Print a failure's text as a GPU job prints it, then die as that job does: prints_failure.py CASE [ATTEMPT ...].

The texts are quoted from public logs (sources in docs/failures/signatures.md):
what CPU-only test machines cannot produce themselves. On attempts not listed (default:
every attempt fails) the rank exits 0.
"""

import os
import sys

TEXTS = {
    # antgroup/echomimic_v2#115, then the exception's exit
    "cuda-oom": ([
        "Traceback (most recent call last):",
        '  File "train.py", line 88, in <module>',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB. GPU 0 has a total capacity of "
        "15.69 GiB of which 3.71 GiB is free. Including non-PyTorch memory, this process has 11.14 GiB memory in use.",
    ], "exit"),
    # hiyouga/LlamaFactory#7396 and NVIDIA/nccl#1609: the watchdog's timeout, then its C++ abort
    "nccl-timeout": ([
        "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
        "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
        "[rank0]:[E321 02:07:08.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or "
        "timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
    ], "abort"),
    # ostris/ai-toolkit#470
    "ecc-error": ([
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "Search for `cudaErrorECCUncorrectable' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
        "group__CUDART__TYPES.html for more information.",
    ], "exit"),
    # evo-design/evo#136
    "cuda-error": ([
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
        "be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    ], "exit"),
}

case, attempts = sys.argv[1], [int(a) for a in sys.argv[2:]]
if attempts and int(os.environ["TORCHELASTIC_RESTART_COUNT"]) not in attempts:
    sys.exit(0)
lines, end = TEXTS[case]
print("\n".join(lines), file=sys.stderr, flush=True)
if end == "abort":
    os.abort()
sys.exit(1)
