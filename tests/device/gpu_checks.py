"""GPU checks of Kernodeck's in-env settings, setters, backend and system code on a CUDA torch, as one script for a
lent GPU machine (docs/gpu.md says what it found on an H200): ``python3 tests/device/gpu_checks.py`` from the
repository's root, with OUT naming the folder for gpu_checks.json. Not a pytest module: CI has no GPU."""
import functools
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
OUT = Path(os.environ.get("OUT", "/tmp/out"))
OUT.mkdir(parents=True, exist_ok=True)
result: dict = {}


def section(name):
    def deco(fn):
        try:
            result[name] = fn()
        except Exception as exc:  # keep going: every section is reported
            result[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        (OUT / "gpu_checks.json").write_text(json.dumps(result, indent=1, default=str))
        print(name, "done", flush=True)
        return fn
    return deco


import torch  # noqa: E402

from kernodeck.inenv import backend, setters, settings, system  # noqa: E402
from kernodeck.inenv._common import Context  # noqa: E402
from tests.helpers import switchflips  # noqa: E402


@section("torch")
def _torch():
    return {"version": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
            "available": torch.cuda.is_available(), "cudnn": torch.backends.cudnn.version(),
            "device": torch.cuda.get_device_name(0), "python": sys.version}


@section("classified")
def _classified():
    return switchflips.classified(torch, settings, setters)


@section("applied_vs_read_back")
def _applied():
    applied = settings.apply()
    back = settings.read_back(torch)
    diff = settings.differences({k: v for k, v in applied.items() if k not in settings.PROCESS_START}, back)
    return {"differences": diff, "read_back": back}


@section("every_switch")
def _every_switch():
    back = torch.backends
    cases = {**switchflips.flips(torch),
             **{name: functools.partial(flip, torch) for name, flip in switchflips.DETERMINISM.items()}}
    found = switchflips.outcomes(torch, settings, setters, cases)
    # a library-style cudnn.flags block (transformers' CTC loss), inside a window, on a GPU
    before = settings.read_back(torch)
    try:
        with setters.watching(torch, before, "the entry"), torch.backends.cudnn.flags(enabled=False):
            pass
        found["with cudnn.flags(enabled=False) block"] = "unseen"
    except Exception as exc:
        found["with cudnn.flags(enabled=False) block"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    # preferred libraries (str-valued): set to another and back
    for lib, other in (("blas", "cublaslt"), ("linalg", "magma")):
        before = settings.read_back(torch)
        was = before[f"cuda.preferred_{lib}_library"]
        fn = getattr(back.cuda, f"preferred_{lib}_library")
        try:
            with setters.watching(torch, before, "the entry"):
                fn(other)
                fn(was.split(".")[-1].lower() if "." in was else was)
            found[f"cuda.preferred_{lib}_library"] = f"unseen (was {was})"
        except Exception as exc:
            found[f"cuda.preferred_{lib}_library"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    return found


@section("backend_cuda")
def _backend():
    ctx = Context(config={"expect_backend": "cuda"}, out=OUT / "ctx")
    return backend.run(ctx)


@section("backend_cuda_hidden")
def _hidden():
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from kernodeck.inenv import backend; "
            "from kernodeck.inenv._common import Context, CheckFailed; from pathlib import Path\n"
            "try:\n  backend.run(Context(config={'expect_backend': 'cuda'}, out=Path('/tmp/x')))\n  print('PASSED')\n"
            "except CheckFailed as e:\n  print('FAILED', e)\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    return {"rc": proc.returncode, "out": proc.stdout[-600:], "err": proc.stderr[-600:]}


@section("system")
def _system():
    rec = system.collect()
    rec.pop("loaded_libraries", None)
    return rec


@section("determinism_gpu")
def _determinism():
    settings.apply()
    dev = "cuda:0"
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(64, 3, 64, 64, generator=g).to(dev)
    w = torch.randn(16, 3, 5, 5, generator=g).to(dev)
    a = torch.randn(2048, 2048, generator=g).to(dev)
    idx = torch.randint(0, 100, (100000,), generator=g).to(dev)
    src = torch.randn(100000, generator=g).to(dev)

    def once():
        conv = torch.nn.functional.conv2d(x, w)
        mm = a @ a
        sc = torch.zeros(100, device=dev).index_add_(0, idx, src)
        return [t.cpu() for t in (conv, mm, sc)]

    r1, r2 = once(), once()
    same = [bool(torch.equal(p, q)) for p, q in zip(r1, r2, strict=False)]
    # TF32 on: the matmul's bits move (why the flags are recorded and held)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    tf32 = (a @ a).cpu()
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    ref64 = (a.double() @ a.double()).cpu()
    # a nondeterministic op refused under deterministic algorithms
    try:
        torch.bincount(idx, weights=src)
        refused = "ran"
    except RuntimeError as exc:
        refused = str(exc)[:200]
    # nondeterministic without the settings: index_add_ with deterministic off, repeated
    torch.use_deterministic_algorithms(False)
    runs = [torch.zeros(100, device=dev).index_add_(0, idx, src).cpu() for _ in range(5)]
    torch.use_deterministic_algorithms(True)
    return {"bitwise_repeat_conv_mm_index_add": same,
            "tf32_vs_fp32_max_abs": float((tf32 - r1[1]).abs().max()),
            "fp32_vs_fp64_max_abs": float((r1[1].double() - ref64).abs().max()),
            "bincount_under_deterministic": refused,
            "index_add_nondeterministic_distinct_results": len({t.numpy().tobytes() for t in runs})}




def child(_):
    """A forked Pool child's work (at module level: Pool pickles it by name)."""
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    return 1


def tf32_child(_):
    torch.backends.cuda.matmul.allow_tf32 = True  # a child (no CUDA in it): judged there
    return 1


@section("set7_set8_gpu")
def _set78():
    import multiprocessing as mp
    import threading
    import time
    settings.apply()
    found = {"opt_einsum_available": torch.backends.opt_einsum.is_available()}
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(s, generator=g) for s in ((600, 3), (3, 600), (600, 5)))
    on = torch.einsum("ij,jk,kl->il", a, b, c)
    torch.backends.opt_einsum.enabled = False
    off = torch.einsum("ij,jk,kl->il", a, b, c)
    torch.backends.opt_einsum.enabled = True
    found["einsum_bits_move_with_the_attribute"] = not torch.equal(on, off)
    found["einsum_max_abs"] = float((on - off).abs().max())

    def case(name, body):
        before = settings.read_back(torch)
        try:
            with setters.watching(torch, before, "the entry"):
                body()
            found[name] = "unseen"
        except Exception as exc:
            found[name] = f"{type(exc).__name__}: {str(exc)[:200]}"

    def attr():
        torch.backends.opt_einsum.enabled = False
        torch.backends.opt_einsum.enabled = True
    case("einsum attribute off and on", attr)
    x = torch.randn(256, 256, device="cuda")  # CUDA initialised in the parent before the fork

    def loader():
        data = torch.utils.data.TensorDataset(torch.randn(64, 4))
        return [bt[0].cuda() for bt in torch.utils.data.DataLoader(data, batch_size=8, num_workers=2)]
    case("dataloader 2 forked workers, CUDA parent (control)", loader)

    def pool():
        with mp.get_context("fork").Pool(1) as p:
            p.map(child, [0])
    case("forked pool child flush-denormal", pool)
    def pool2():
        with mp.get_context("fork").Pool(1) as p:
            p.map(tf32_child, [0])
    case("forked pool child tf32 flag", pool2)
    state = {}
    def worker():
        time.sleep(0.5)
        try:
            torch.backends.cudnn.allow_tf32 = True
        except Exception as exc:
            state["thread"] = str(exc)[:120]
    case("thread start", lambda: threading.Thread(target=worker, daemon=True).start())
    time.sleep(1.5)
    case("next call after a thread set cudnn tf32", lambda: (x @ x).sum().item())
    found["thread_saw"] = state.get("thread")
    torch.backends.cudnn.allow_tf32 = False
    case("plain GPU call (control)", lambda: (x @ x).sum().item())
    return found


print(json.dumps({k: result[k] for k in ("classified", "set7_set8_gpu")}, indent=1, default=str))
