"""Device discipline, checked without a GPU (issue 42): every tensor the training paths make says where it lives.

A tensor made without `device=` lands on the CPU. On a CPU-only machine that is always where the model is, so no
run there can show the mistake; on a GPU it stops the job at its first step ("Expected all tensors to be on the
same device", "CPU Scalar support for self argument is not supported when calling addcmul on CUDA tensors"). So
this test reads the code instead of running it: in the packages whose code meets the model's tensors (both
engines, the code verl runs in its workers, the update rules and methods, the preflight, the eval backends),

  1. every call of a torch tensor factory (torch.tensor, zeros, full, arange, Generator, ...) passes `device=`:
     the model's device, or "cpu" where the tensor is assembled on the CPU and moved to the device once (a batch
     being packed) or never meets the model (a count, a numpy bridge). `torch.from_numpy` and the legacy
     `torch.FloatTensor`-style constructors take no device: use torch.as_tensor(..., device=...).
  2. no tensor is made at import time (a module-level tensor lives on the CPU in every process, verl's GPU
     workers included: the GXPO failure of issue 42 was one).

`*_like` and `Tensor.new_*` inherit the device of the tensor they are called on and are always fine.
`workflow/gpu_check.py` (`rlsweep gpu-check`) is the same class of check on a real GPU.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers import REPO

# the code that meets the model's tensors (DESIGN.md, "Devices")
CHECKED = ["workflow/algos", "workflow/methods", "workflow/engines", "workflow/preflight.py",
           "workflow/eval/backends.py"]

FACTORIES = {"tensor", "as_tensor", "asarray", "zeros", "ones", "empty", "full", "arange", "range", "linspace",
             "logspace", "eye", "rand", "randn", "randint", "randperm", "normal", "scalar_tensor", "empty_strided",
             "tril_indices", "triu_indices", "Generator", "sparse_coo_tensor"}
NO_DEVICE_ARGUMENT = {"from_numpy", "frombuffer", "Tensor", "FloatTensor", "DoubleTensor", "HalfTensor",
                      "BFloat16Tensor", "LongTensor", "IntTensor", "ShortTensor", "ByteTensor", "CharTensor",
                      "BoolTensor"}


def python_files() -> list[Path]:
    files: list[Path] = []
    for entry in CHECKED:
        path = REPO / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def torch_names(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """The names the module binds to torch itself (`import torch`, `import torch as th`) and the torch functions it
    imported by name (`from torch import zeros as z` -> {'z': 'zeros'})."""
    modules, functions = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "torch"}
        elif isinstance(node, ast.ImportFrom) and node.module == "torch":
            functions |= {a.asname or a.name: a.name for a in node.names}
    return modules, functions


def factory_name(call: ast.Call, modules: set[str], functions: dict[str, str]) -> str | None:
    """The torch factory a call makes a tensor with (None: not one)."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules:
        name = f.attr
    elif isinstance(f, ast.Name) and f.id in functions:
        name = functions[f.id]
    else:
        return None
    return name if name in FACTORIES | NO_DEVICE_ARGUMENT else None


def violations(source: str, filename: str) -> list[str]:
    """Where a source file breaks the two rules of this module's docstring: 'file:line: why' each."""
    tree = ast.parse(source, filename)
    modules, functions = torch_names(tree)
    inside_functions: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside_functions |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (name := factory_name(node, modules, functions)) is None:
            continue
        where = f"{filename}:{node.lineno}"
        if id(node) not in inside_functions:
            found.append(f"{where}: torch.{name} at import time: a module-level tensor stays on the CPU in every "
                         "process; make it where it is used, on the device of the tensors it meets")
        elif name in NO_DEVICE_ARGUMENT:
            found.append(f"{where}: torch.{name} takes no device: use torch.as_tensor(..., device=...)")
        elif not any(k.arg == "device" for k in node.keywords):
            found.append(f"{where}: torch.{name} without device=: the model's device, or \"cpu\" where the tensor "
                         "is staged on the CPU and moved once (or never meets the model)")
    return found


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_tensor_the_training_paths_make_names_its_device(path: Path):
    assert not violations(path.read_text(), str(path.relative_to(REPO))), "\n".join(
        violations(path.read_text(), str(path.relative_to(REPO))))


def test_the_checked_packages_exist():
    """A renamed package would leave this test checking nothing."""
    missing = [e for e in CHECKED if not (REPO / e).exists()]
    assert not missing, missing
    assert len(python_files()) > 30


@pytest.mark.parametrize("snippet, expected", [
    # the three failures of issue 42, as they were written at a08ab8e
    ("import torch\n_ONE = torch.ones(())\n", "at import time"),
    ("import torch\ndef f(x):\n    return torch.quantile(x, torch.tensor([0.1, 0.5], dtype=torch.float64))\n",
     "torch.tensor without device="),
    ("import torch\ndef f(d):\n    return torch.Generator().manual_seed(0)\n", "torch.Generator without device="),
    ("import torch\nimport numpy as np\ndef f(a):\n    return torch.from_numpy(np.asarray(a))\n", "takes no device"),
    ("from torch import zeros as z\ndef f():\n    return z(3)\n", "torch.zeros without device="),
    ("import torch as th\ndef f():\n    return th.full((2,), 1.0)\n", "torch.full without device="),
])
def test_the_check_finds_a_tensor_made_without_a_device(snippet: str, expected: str):
    found = violations(snippet, "planted.py")
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("snippet", [
    "import torch\ndef f(x):\n    return torch.zeros(3, device=x.device) + torch.ones_like(x) + x.new_zeros(2)\n",
    "import torch\ndef f():\n    return torch.tensor([1, 2], device=\"cpu\")\n",
    "import torch\ndef f(x):\n    return torch.softmax(x, -1)\n",
])
def test_the_check_passes_tensors_that_name_their_device(snippet: str):
    assert violations(snippet, "fine.py") == []
