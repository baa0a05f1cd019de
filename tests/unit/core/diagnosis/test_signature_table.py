"""The built-in failure signatures, each on the real text a rank prints, and the matcher's rules."""

from __future__ import annotations

import signal

import pytest

from elastic.core.diagnosis.signatures import (
    BUILTIN_SIGNATURES,
    Diagnosis,
    FailureClass,
    diagnose,
    diagnosis_from,
    parse_signature,
)
from elastic.core.evidence import LINE_CAP, ending_error, normalize

D, T, N, S = FailureClass.DETERMINISTIC, FailureClass.TRANSIENT, FailureClass.NODE, FailureClass.SYMPTOM

# (signature, class, the lines as printed, how it ended: exit code or -signal, the line expected).
# Sources in docs/failures/signatures.md; the texts are quoted as they were printed.
REAL_TEXTS = [
    ("import-error", D, [
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 3, in <module>',
        "    import flash_attn_does_not_exist",
        "ModuleNotFoundError: No module named 'flash_attn_does_not_exist'",
    ], 1, "ModuleNotFoundError: No module named 'flash_attn_does_not_exist'"),
    ("import-error", D, ["Traceback (most recent call last):", '  File "/work/train.py", line 3, in <module>', "ImportError: cannot import name 'y' from 'x' (/work/x.py)"], 1,
     "ImportError: cannot import name 'y' from 'x' (/work/x.py)"),
    ("syntax-error", D, ['  File "<string>", line 1', "    def f(:", "          ^", "SyntaxError: invalid syntax"], 1,
     "SyntaxError: invalid syntax"),
    ("syntax-error", D, ['  File "/work/train.py", line 2', "    x = 1", "IndentationError: unexpected indent"], 1, "IndentationError: unexpected indent"),
    ("usage-error", D, ["usage: train.py [-h] [--lr LR]", "train.py: error: unrecognized arguments: --nope"], 2,
     "train.py: error: unrecognized arguments: --nope"),
    ("file-not-found", D, ["Traceback (most recent call last):", '  File "/work/train.py", line 3, in <module>', "FileNotFoundError: [Errno 2] No such file or directory: 'configs/c.yml'"], 1,
     "FileNotFoundError: [Errno 2] No such file or directory: 'configs/c.yml'"),
    # torch 2.13's CPU wheel: torch.cuda.set_device(LOCAL_RANK) and init_process_group("nccl")
    ("cuda-not-built", D, [
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 4, in <module>',
        "    torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"]))",
        '  File "/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 689, in set_device',
        "    torch._C._cuda_setDevice(device)",
        "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'",
    ], 1, None),
    ("cuda-not-built", D, [
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2181, in '
        "_new_process_group_helper",
        "    raise RuntimeError(\"Distributed package doesn't have NCCL built in\")",
        "RuntimeError: Distributed package doesn't have NCCL built in",
    ], 1, None),
    # torch's _lazy_init on a CPU build (model.cuda(), torch.zeros(1, device="cuda"))
    ("cuda-not-built", D, [
        '  File "/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 403, in _lazy_init',
        '    raise AssertionError("Torch not compiled with CUDA enabled")',
        "AssertionError: Torch not compiled with CUDA enabled",
    ], 1, None),
    # torch's CUDA build: no GPU visible (CUDA_VISIBLE_DEVICES=""), no driver, NCCL's process group
    ("no-gpu", D, ['  File "/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 412, in _lazy_init',
                   "    torch._C._cuda_init()", "RuntimeError: No CUDA GPUs are available"], 1, None),
    ("no-gpu", D, ["Traceback (most recent call last):", "    torch._C._cuda_init()",
                   "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU "
                   "and installed a driver from http://www.nvidia.com/Download/index.aspx"], 1, None),
    ("no-gpu", D, ["Traceback (most recent call last):", "    backend_class = ProcessGroupNCCL(",
                   "ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!"], 1, None),
    # torch 2.13's gloo, rank 0 gone mid all_reduce (printed through torch's [rankN]: excepthook)
    ("gloo-error", S, [
        "[rank1]:     work.wait()",
        "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:52893: Connection reset by peer. This is typically caused by a remote worker hanging or bugs in "
        "the application. Check the logs of the remote worker before reporting an error. GLHF!",
    ], 1, None),
    # antgroup/echomimic_v2#115 (PyTorch 2.4+)
    ("cuda-oom", T, [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB. GPU 0 has a total capacity of "
        "15.69 GiB of which 3.71 GiB is free. Including non-PyTorch memory, this process has 11.14 GiB memory in use."
    ], 1, None),
    # pytorch/pytorch#16417: the older class
    ("cuda-oom", T, ["RuntimeError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 44.99 GiB total capacity"],
     1, None),
    # jax-ml/jax#13428
    ("cuda-oom", T, ["jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
                     "allocate 6291456 bytes.", "BufferAssignment OOM Debugging."], 1,
     "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes."),
    # ecmwf-lab/ai-models-graphcast#18
    ("cuda-oom", T, ["jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for "
                     "2.99GiB (3206250496B) on device ordinal 0"], 1, None),
    # huggingface/autotrain-advanced#737 (ROCm)
    ("cuda-oom", T, ["torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB"], 1, None),
    # amd-agi/maxtext-slurm docs/job-submission.md
    ("cuda-oom", T, ["rocdevice.cpp:3583: Aborting with error : HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime "
                     "failed to allocate the necessary resources. Available Free mem : 24 MB"], -6, None),
    # chrisknewman/tusas#149 (Slurm)
    ("host-oom", T, ["slurmstepd: error: Detected 1 oom_kill event in StepId=440575.0. Some of the step tasks have "
                     "been OOM Killed.", "srun: error: nid001277: tasks 1-3: Out Of Memory"], -9,
     "srun: error: nid001277: tasks 1-3: Out Of Memory"),
    # hafs-community/HAFS#101 (older Slurm)
    ("host-oom", T, ["slurmstepd: error: Detected 1 oom-kill event(s) in step 3495064.0 cgroup. Some of your "
                     "processes may have been killed by the cgroup out-of-memory handler."], -9, None),
    # real-stanford/flingbot#11 (Ray's memory monitor)
    ("host-oom", T, ["ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."], 1,
     None),
    # the kernel's own line, when a rank's tail holds it (dmesg piped into the log)
    ("host-oom", T, ["Memory cgroup out of memory: Killed process 4331 (python) total-vm:1234kB"], -9, None),
    # NVIDIA/nccl#1609, the watchdog's abort
    ("nccl-timeout", S, [
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG 0 (default_pg) Rank 0] Process group watchdog thread terminated with exception: [Rank 0] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=34397, OpType=_ALLGATHER_BASE, "
        "NumelIn=376320, NumelOut=1505280, Timeout(ms)=1800000) ran for 1800006 milliseconds before timing out.",
    ], -6, None),
    # hiyouga/LlamaFactory#7396
    ("nccl-timeout", S, [
        "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
        "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
        "[rank0]:[E321 02:07:08.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or "
        "timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.",
    ], -6, "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
           "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out."),
    # OFA-Sys/OFA#271, older builds
    ("nccl-timeout", S, ["[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
                         "WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 "
                         "milliseconds before timing out."], -6, None),
    # sgl-project/sglang#1693
    ("nccl-timeout", S, [
        "[rank4]:[E1016 03:31:38.929241154 ProcessGroupNCCL.cpp:621] [Rank 4] Some NCCL operations have failed or "
        "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
    ], -6, None),
    # NVIDIA/nccl#2076
    ("nccl-error", S, [
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
        "remote process exited or there was a network error, NCCL version 2.21.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Last error:",
        "socketProgressOpt: Call to recv from 172.16.0.2<33759> failed : Connection reset by peer",
    ], 1, "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."),
    # pytorch/pytorch#73897
    ("nccl-error", S, ["torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                       "ProcessGroupNCCL.cpp:1691, unhandled system error (run with NCCL_DEBUG=INFO for details), "
                       "NCCL version 2.19.3"], 1, None),
    # ostris/ai-toolkit#470
    ("ecc-error", N, ["RuntimeError: CUDA error: uncorrectable ECC error encountered",
                      "Search for `cudaErrorECCUncorrectable' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
                      "group__CUDART__TYPES.html for more information."], 1,
     "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    # nagadit/DeepFaceLab_Linux#89
    ("ecc-error", N, ["CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered"], 1, None),
    # stas00/ml-engineering: a row remap
    ("ecc-error", N, ["NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset "
                      "gpu to activate."], 1, None),
    ("gpu-lost", N, ["NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."], -6, None),
    # NVIDIA/NVSentinel#155: the form without an Xid number
    ("gpu-lost", N, ["NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: (PCI ID: 10de:26b5) installed in this system has",
                     "NVRM: fallen off the bus and is not responding to commands."], -6, None),
    # pytorch/pytorch#70036
    ("gpu-lost", N, ["RuntimeError: HIP error: hipErrorNoDevice"], 1, None),
    # evo-design/evo#136: the advice lines after it are never the line
    ("cuda-error", T, [
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
        "be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ], 1, "RuntimeError: CUDA error: an illegal memory access was encountered"),
    # pytorch/pytorch#74235
    ("cuda-error", T, ["RuntimeError: CUDA error: unspecified launch failure"], 1, None),
    # ROCm/legacy-rocm-build#1535 and #4021
    ("cuda-error", T, ["Memory access fault by GPU node-2 (Agent handle: 0x55fea5592860) on address 0x7fc133800000. "
                       "Reason: Page not present or supervisor privilege."], -6, None),
    ("cuda-error", T, ["HW Exception by GPU node-9 (Agent handle: 0x631351bb5a20) reason :GPU Hang"], -6, None),
    # databrickslabs/dolly#139
    ("disk-full", T, ["OSError: [Errno 28] No space left on device"], 1, None),
    # open-mmlab/mmdetection#12069
    ("disk-full", T, ["OSError: [Errno 122] Disk quota exceeded"], 1, None),
    # h2oai/h2o-llmstudio#214
    ("disk-full", T, ["RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing "
                      "file data/228: file write failed"], 1, None),
    # om-ai-lab/VLM-R1#289
    ("port-in-use", T, ["RuntimeError: The server socket has failed to listen on any local network address. port: "
                        "29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"], 1, None),
    # showlab/Tune-A-Video#90
    ("port-in-use", T, ["The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)."],
     1, None),
    # jax-ml/jax#39095
    ("coordinator-heartbeat", S, [
        "E0929 17:42:48.594192 1044529 coordination_service_agent.cc:332] Polled an error from coordination service "
        "(this can be an error from this or another task).",
        "F0929 17:42:48.594200 1044529 client.h:77] Terminating process because the JAX distributed service detected "
        "fatal errors. This most likely indicates that another task died; see the other task logs for more details.",
    ], -6, "Terminating process because the JAX distributed service detected fatal errors. This most likely indicates "
           "that another task died; see the other task logs for more details."),
    # jax-ml/jax#23599
    ("coordinator-heartbeat", S, ["/job:jax_worker/replica:0/task:0 has been set to ERROR in coordination service: "
                                  "UNAVAILABLE: Task /job:jax_worker/replica:0/task:0 heartbeat timeout. This "
                                  "indicates that the remote task has failed, got preempted, or crashed "
                                  "unexpectedly."], -6, None),
    # amd-agi/maxtext-slurm docs/jax-heartbeat-false-positive-postmortem.md
    ("coordinator-heartbeat", S, ["UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):",
                                  "  /job:jax_worker/replica:0/task:1"], -6,
     "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):"),
    # NVIDIA/Megatron-LM rerun state machine's message, and its CI log (NVIDIA/Megatron-LM#5026)
    ("nan-loss", T, ["RuntimeError: Rank 3, node nodeA, device 3, iteration 7: Unexpected result tensor(nan, "
                     "device='cuda:3') (message='found NaN in local forward loss calculation')"], 1, None),
    ("nan-loss", T, ["ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 3 at iteration #3 "
                     "invocation #2 (message='found NaN in local grad norm for bucket #0 in backward pass before "
                     "data-parallel communication collective')"], 1, None),
    ("nan-loss", T, ["ValueError: loss is nan at step 7"], 1, None),
]


@pytest.mark.parametrize(
    "signature, failure_class, lines, how, expected_line", REAL_TEXTS,
    ids=[f"{case[0]}-{i}" for i, case in enumerate(REAL_TEXTS)],
)
def test_each_built_in_rule_matches_the_real_text(
    signature: str, failure_class: FailureClass, lines: list[str], how: int, expected_line: str | None
) -> None:
    """A rank that printed the real text gets the rule's id, class and the line it matched (a rank
    given no GPU: ``no-gpu`` is the code's then, below the node's)."""
    exit_code, signum = (how, None) if how >= 0 else (None, -how)

    found = diagnose(lines, exit_code=exit_code, signal=signum, started=False, gpus=0)

    assert found is not None, lines
    assert (signature, failure_class) == (found.signature, found.failure_class)
    assert (expected_line or normalize(lines[-1])) == found.line


def test_every_built_in_rule_has_a_real_text_and_a_unique_id() -> None:
    """No rule of the table goes untested, and ids are stable keys (unique)."""
    ids = [rule.id for rule in BUILTIN_SIGNATURES]
    assert len(ids) == len(set(ids))
    assert set(ids) == {case[0] for case in REAL_TEXTS} | {"teardown"}  # teardown: no text (below)


def test_the_issue_s_ids_are_all_built_in() -> None:
    """The ids report.json carries, as users will grep for them."""
    assert {
        "import-error", "syntax-error", "usage-error", "file-not-found", "cuda-oom", "host-oom", "nccl-timeout",
        "nccl-error", "ecc-error", "gpu-lost", "cuda-error", "disk-full", "port-in-use", "coordinator-heartbeat",
        "nan-loss", "teardown", "gloo-error", "cuda-not-built", "no-gpu",
    } == {rule.id for rule in BUILTIN_SIGNATURES}


def test_cuda_asked_of_a_cpu_build_or_of_no_gpu_says_what_to_do() -> None:
    """Both rules carry a hint naming the gloo backend, journaled with the diagnosis and read back."""
    for lines, says in ((["AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"], "CPU build"),
                        (["RuntimeError: No CUDA GPUs are available"], "no GPU is visible here")):
        found = diagnose(["Traceback (most recent call last):", *lines], exit_code=1, signal=None, started=True,
                         gpus=0)
        assert found is not None and D == found.failure_class
        assert says in found.hint and 'init_process_group("gloo")' in found.hint
        assert found.hint == found.fields()["hint"]
        assert found == diagnosis_from(found.fields())


NO_GPU = [
    ["Traceback (most recent call last):", '  File "/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", '
     "line 412, in _lazy_init", "    torch._C._cuda_init()", "RuntimeError: No CUDA GPUs are available"],
    ["Traceback (most recent call last):", "    torch._C._cuda_init()",
     "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
     "driver from http://www.nvidia.com/Download/index.aspx"],
    ["Traceback (most recent call last):", "    backend_class = ProcessGroupNCCL(",
     "ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!"],
]


@pytest.mark.parametrize("lines", NO_GPU)
@pytest.mark.parametrize(("gpus", "failure_class", "says"), [
    (0, D, "use the gloo backend"),  # given none: the script asks CUDA of a machine without it
    (1, N, "fallen off the bus"),  # given one (--isolate-gpus): the node lost it
    (8, N, "fallen off the bus"),  # given its node's eight
    (None, N, "fallen off the bus"),  # not known: one restart too many, not a fixable run stopped
])
def test_no_gpu_is_the_nodes_fault_when_the_rank_was_given_one_and_the_codes_when_it_was_given_none(
    lines: list[str], gpus: int | None, failure_class: FailureClass, says: str
) -> None:
    """The same words, ``no-gpu`` either way: deterministic (with the gloo hint) for a rank the plan
    gave no GPU, node for one it gave a GPU (its node lost it: suspected, restarted elsewhere)."""
    found = diagnose(lines, exit_code=1, signal=None, started=True, gpus=gpus)

    assert found is not None
    assert ("no-gpu", failure_class) == (found.signature, found.failure_class)
    assert says in found.hint
    assert found == diagnosis_from(found.fields())


def test_a_warning_that_cuda_is_missing_is_not_why_a_rank_died() -> None:
    """torch's warning from is_available() on a node without a driver, then another error: not no-gpu."""
    lines = ["UserWarning: CUDA initialization: Found no NVIDIA driver on your system. Please check that you have "
             "an NVIDIA GPU and installed a driver (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)",
             "Traceback (most recent call last):", '  File "t.py", line 9, in <module>', "KeyError: 'lr'"]
    assert diagnose(lines, exit_code=1, signal=None, started=False) is None


@pytest.mark.parametrize("lines", [
    ["INFO:hypercorn.error information about gradient health"],  # NVRx's false positives for nan/inf
    ["step 10 loss 2.3 nanoseconds 17"],
    ["Killed"],  # a bare Killed is no OOM evidence
    ["ValueError: label 7 out of range"],
    ["Failed call to cuInit: UNKNOWN ERROR (303)"],
    ["[W socket.cpp:558] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 99 - Cannot "
     "assign requested address)."],
])
def test_lines_no_rule_is_about_match_nothing(lines: list[str]) -> None:
    """Lookalikes and harmless noise give no signature: the failure keeps its kind alone."""
    assert diagnose(lines, exit_code=1, signal=None, started=True) is None


def test_start_up_rules_stop_applying_once_the_attempt_reached_a_step() -> None:
    """A missing module after the first step may be a lazy import on a flaky file system: not deterministic."""
    lines = ["Traceback (most recent call last):", '  File "t.py", line 1, in <module>',
             "ModuleNotFoundError: No module named 'plugin'"]
    assert "import-error" == diagnose(lines, exit_code=1, signal=None, started=False).signature  # type: ignore[union-attr]
    assert diagnose(lines, exit_code=1, signal=None, started=True) is None


def test_usage_error_needs_exit_2_and_the_usage_line() -> None:
    """argparse's pair: its ``usage:`` line and ``prog: error:``, exit 2; either alone is not it."""
    both = ["usage: train.py [-h]", "train.py: error: the following arguments are required: --config"]
    assert "usage-error" == diagnose(both, exit_code=2, signal=None, started=False).signature  # type: ignore[union-attr]
    assert diagnose(both, exit_code=1, signal=None, started=False) is None
    assert diagnose(both[1:], exit_code=2, signal=None, started=False) is None


def test_teardown_is_a_crash_after_a_peer_s_exit_0() -> None:
    """The work was done (a peer exited 0) and the rank died by a crash signal on its way out:
    C++'s terminate() (the line it printed is shown), a segfault with nothing printed."""
    lines = ["step 100 loss 1.2", "terminate called without an active exception"]
    found = diagnose(lines, exit_code=None, signal=int(signal.SIGABRT), started=True, after_exit_0=True)
    assert Diagnosis("teardown", T, "terminate called without an active exception") == found
    assert Diagnosis("teardown", T, "") == diagnose([], exit_code=None, signal=int(signal.SIGSEGV), started=True,
                                                    after_exit_0=True)
    faulthandler = ["Fatal Python error: Segmentation fault", "", "Current thread 0x00007f (most recent call first):",
                    '  File "train.py", line 9 in <module>']
    assert Diagnosis("teardown", T, "Fatal Python error: Segmentation fault") == diagnose(
        faulthandler, exit_code=None, signal=int(signal.SIGSEGV), started=True, after_exit_0=True)
    aborted = [*lines, "Fatal Python error: Aborted", '  File "train.py", line 9 in <module>']
    assert "terminate called without an active exception" == diagnose(  # type: ignore[union-attr]
        aborted, exit_code=None, signal=int(signal.SIGABRT), started=True, after_exit_0=True).line
    assert diagnose(lines, exit_code=None, signal=int(signal.SIGABRT), started=True) is None  # mid-run: a crash
    assert diagnose(lines, exit_code=1, signal=None, started=True, after_exit_0=True) is None  # an exit, no crash
    assert diagnose(lines, exit_code=None, signal=int(signal.SIGTERM), started=True, after_exit_0=True) is None


def test_an_exception_rule_reads_only_the_last_exception() -> None:
    """A caught import error printed early is not why the rank died later of something else."""
    lines = [
        "ModuleNotFoundError: No module named 'apex'",
        "falling back to the PyTorch optimizer",
        "Traceback (most recent call last):",
        "ValueError: label 7 out of range",
    ]
    ending = ending_error(lines)
    assert ending is not None and 3 == ending.index
    assert diagnose(lines, exit_code=1, signal=None, started=False) is None


def test_a_handled_import_traceback_names_no_later_death() -> None:
    """An import probe's logged traceback at start-up, then output: a later SIGKILL (an OOM kill) or
    an exit with no traceback of its own is not an import error."""
    lines = [
        "ERROR:root:apex is not installed, using the PyTorch optimizer",
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 5, in <module>',
        "    import apex",
        "ModuleNotFoundError: No module named 'apex'",
        "loading the model", "model loaded: 124M parameters", "reading shard 0", "epoch 0 iter 1 loss 7.1",
    ]
    assert diagnose(lines, exit_code=None, signal=int(signal.SIGKILL), started=False) is None
    assert diagnose(lines[:5], exit_code=None, signal=int(signal.SIGKILL), started=False) is None
    assert diagnose(lines, exit_code=1, signal=None, started=False) is None


def test_the_error_file_message_is_the_last_exception() -> None:
    """torch's @record message (appended after the tail) is the rank's own last exception."""
    lines = ["some output", "ModuleNotFoundError: No module named 'x'"]
    found = diagnose(lines, exit_code=1, signal=None, started=False,
                     ending=ending_error(lines[:1], recorded=lines[1]))
    assert Diagnosis("import-error", D, "ModuleNotFoundError: No module named 'x'") == found


def test_a_root_line_beats_a_symptom_line_in_the_same_tail() -> None:
    """A CUDA error that surfaced in NCCL's watchdog thread is the cause, not the watchdog's timeout."""
    lines = [
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
        "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    assert "cuda-error" == diagnose(lines, exit_code=None, signal=6, started=True).signature  # type: ignore[union-attr]


@pytest.mark.parametrize("prefixed, plain", [
    ("[rank3]:ModuleNotFoundError: No module named 'x'", "ModuleNotFoundError: No module named 'x'"),
    ("[default0]:OSError: [Errno 28] No space left on device", "OSError: [Errno 28] No space left on device"),
    ("3: SyntaxError: invalid syntax", "SyntaxError: invalid syntax"),
    ("\x1b[31mRuntimeError: boom\x1b[0m", "RuntimeError: boom"),
    ("E0212 19:58:10.123456 1234 client.h:77] Terminating process", "Terminating process"),
    ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog", "[Rank 0] Watchdog"),
    ("(pid=4331, ip=10.0.0.2) ValueError: x", "ValueError: x"),
])
def test_launchers_prefixes_are_stripped_before_matching(prefixed: str, plain: str) -> None:
    """torch's, torchrun's, srun's, glog's and Ray's prefixes do not hide an anchored rule."""
    assert plain == normalize(prefixed)


def test_a_huge_line_is_read_at_its_start_and_end_only() -> None:
    """A 10 MB line costs what 2,000 characters cost: its start (where errors name their subject) and end."""
    line = "OSError: [Errno 28] No space left on device" + "x" * 10_000_000 + " tail"
    shown = normalize(line)
    assert len(shown) <= 2 * LINE_CAP + 3
    assert "disk-full" == diagnose([line], exit_code=1, signal=None, started=True).signature  # type: ignore[union-attr]


def test_a_user_rule_comes_first() -> None:
    """``--signature 'MyDataError=deterministic'`` beats every built-in, first match wins."""
    mine = parse_signature("MyDataError=deterministic")
    lines = ["OSError: [Errno 28] No space left on device", "MyDataError: shard 12 corrupt"]
    found = diagnose(lines, exit_code=1, signal=None, started=True, rules=(mine, *BUILTIN_SIGNATURES))
    assert Diagnosis("user:MyDataError", D, "MyDataError: shard 12 corrupt") == found


@pytest.mark.parametrize("spec, says", [
    ("MyDataError", "must be REGEX=CLASS"),
    ("MyDataError=fatal", "class 'fatal' in 'MyDataError=fatal' must be one of deterministic, transient, node, symptom"),
    ("bad(regex=transient", "does not compile"),
    ("x*=transient", "matches the empty string"),
    ("first\\nsecond=transient", "spans lines"),
    ("(\\w)\\1=transient", "needs what --signature's linear-time matching (RE2) lacks"),
    ("(?<!Warning: )Error=transient", "such as a backreference or a lookaround"),
    ("Error(?=: shard)=node", "(invalid perl operator: (?=)"),
])
def test_a_bad_user_rule_is_refused_in_one_line(spec: str, says: str) -> None:
    """A rule that cannot work, or needs what the linear-time engine lacks, is refused naming what is wrong."""
    with pytest.raises(ValueError) as refused:
        parse_signature(spec)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("spec", [
    "E.*r.*r.*o.*r.*!=deterministic", "(a+)+b=transient", "(\\w+\\s)*end=transient", "(a|ab)*c=transient",
    ".*Error!=transient",
])
def test_a_user_rule_is_searched_by_re2_in_linear_time_whatever_its_pattern(spec: str) -> None:
    """Users' patterns are compiled by RE2, so none can hold the driver's loop: chained ``.*``, nested
    quantifiers and repeated alternations (minutes of backtracking for Python's ``re`` on a few hundred
    characters of a failing line) are accepted and searched in time linear in the line."""
    rule = parse_signature(spec)
    assert "re2" == rule.engine
    line = ("Error " * 20_000)[:100_000]  # a 100 KB line none of them matches
    assert diagnose([line], exit_code=1, signal=None, started=True, rules=(rule,)) is None


def test_built_in_rules_keep_pythons_re() -> None:
    assert {"re"} == {rule.engine for rule in BUILTIN_SIGNATURES}


def test_an_equals_sign_in_the_regex_is_kept() -> None:
    """The last ``=`` splits REGEX from CLASS."""
    rule = parse_signature("loss=nan=transient")
    assert ("loss=nan", T) == (rule.pattern, rule.failure_class)


def test_a_journaled_diagnosis_reads_back_and_unknown_ones_are_dropped() -> None:
    """What the journal holds becomes the same value; a class from a newer version is no diagnosis."""
    found = Diagnosis("disk-full", T, "OSError: [Errno 28] No space left on device")
    assert found == diagnosis_from(found.fields())
    assert "hint" not in found.fields()  # only a rule that has one journals it
    assert diagnosis_from({"signature": "x", "class": "benign", "line": "y"}) is None
    assert diagnosis_from(None) is None


def test_the_docs_table_lists_the_built_in_rules_in_order_with_their_classes() -> None:
    """docs/failures/signatures.md documents the table as it is: every rule, in matching order, with its class
    (and its class for a rank given a GPU, where that differs)."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[4] / "docs" / "failures" / "signatures.md").read_text()
    start = page.index("| signature | class | matches")
    rows = page[start: page.index("\n\n", start)].splitlines()[2:]
    documented = [tuple(cell.strip().strip("`") for cell in row.split("|")[1:3]) for row in rows]
    assert [
        (rule.id, rule.failure_class.value + ("" if rule.given_gpu is None else
                                              f", or {rule.given_gpu.value} for a rank given a GPU"))
        for rule in BUILTIN_SIGNATURES
    ] == documented


def test_a_bare_sigkill_the_node_saw_the_kernel_oom_kill_is_host_oom_and_says_how_it_knows() -> None:
    """A SIGKILL says nothing: with the node's word that its memory cgroup counted the kill it is
    ``host-oom``, shown with that word; without it, it has no signature; a hardware line still wins."""
    seen = "the kernel's OOM killer ended it (memory cgroup /job/step counted 1 OOM kill while it ran)"
    lines = ["step 40 loss 2.31"]

    found = diagnose(lines, exit_code=None, signal=signal.SIGKILL, started=True, oom_kill=seen)
    assert Diagnosis("host-oom", T, seen) == found
    assert diagnose(lines, exit_code=None, signal=signal.SIGKILL, started=True) is None
    gpu = ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."]
    assert "gpu-lost" == diagnose(gpu, exit_code=None, signal=signal.SIGKILL, started=True, oom_kill=seen).signature
