"""The CUDA load crash, again: repeated runs of each variant, then a native backtrace (cuda-gdb)."""
import signal, subprocess, sys, time
MODEL = sys.argv[1]
AUTO = "from ggufspec.llama import lib; lib.llama.LLAMA_LOAD_MODE_AUTO = -99  # undo the fix: AUTO reaches llama.cpp\n"
NOLOG = """
from ggufspec.llama import lib
def ensure_init():
    if not lib._initialised:
        lib.llama.llama_backend_init(); lib._initialised = True
lib.ensure_init = ensure_init
"""
NOPROG = """
from ggufspec.llama import lib
def load_model(path, params):
    lib.ensure_init(); params.use_extra_bufts = params.use_extra_bufts and lib.repack()
    return lib.llama.llama_model_load_from_file(str(path).encode(), params)
lib.load_model = load_model
import ggufspec.llama.model as M; M.lib.load_model = load_model
"""
SHOW = """
import ggufspec.llama.model as M
_init = M.Model.__init__
def init(self, path, *, settings=M.ModelSettings()):
    print("Model", path, settings, flush=True); _init(self, path, settings=settings)
M.Model.__init__ = init
"""
RUN = """
import sys
from ggufspec.cli import main
sys.argv = ["ggufspec", "run", "--target", MODEL, "--draft", MODEL2, "-p", "hello world", "-n", "24", "--compare", "--repeats", "1"]
main()
"""
PRE = f"MODEL={MODEL!r}\nMODEL2={MODEL.replace('tiny', 'tiny2')!r}\n"

def step(name, code, timeout=40):
    t = time.time()
    p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", PRE + code], capture_output=True, text=True, timeout=timeout)
    rc = p.returncode
    what = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"rc={rc}"
    out = [x for x in (p.stdout + p.stderr).splitlines() if x.strip() and not x.startswith(("ggml_cuda_init", "  Device 0"))]
    print(f"== {name}: {what} ({time.time() - t:.1f} s)")
    for x in [x for x in out if x.startswith("Model ")] + out[-(6 if rc else 1):]:
        print("   ", x[:300])
    sys.stdout.flush()
    return rc

step("show settings (fixed)", SHOW + RUN)
for name, code, n in (("auto (before the fix)", AUTO, 4), ("fixed", "", 6), ("auto, no log callback", AUTO + NOLOG, 3),
                      ("auto, no progress callback", AUTO + NOPROG, 3), ("auto + show", AUTO + SHOW, 1)):
    for i in range(n):
        step(f"{name} #{i}", code + RUN)
open("/tmp/keep/crash.py", "w").write(PRE + AUTO + RUN)
