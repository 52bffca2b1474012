"""The file format of the models that the course trains once and ships (`make translators`).

One safetensors file per recipe: each variant's weights under "<name>/<key>" and its
training loss per step under "<name>/.loss"; the metadata holds the recipe, a digest of the
data, the torch version and the measured results (JSON).

    save_variants    write {name: (model, History)} with the metadata, world-readable
    read_metadata    the metadata, recipe and results decoded
    load_variant     a variant's weights into a model of today's sizes -> its loss per step

`shipped_bow` (unit 01) and `shipped_translators` (units 02-04) use it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from course_utils.training import History

__all__ = ["load_variant", "read_metadata", "require_current", "save_variants"]


def save_variants(path, trained: dict[str, tuple[nn.Module, History]], metadata: dict[str, str]
                  ) -> None:
    """Write every (model, History) of `trained` to one safetensors file at `path`."""
    tensors = {}
    for name, (model, history) in trained.items():
        for key, value in model.state_dict().items():
            tensors[f"{name}/{key}"] = value.detach().contiguous()
        tensors[f"{name}/.loss"] = torch.tensor(history.loss, dtype=torch.float64)
    save_file(tensors, str(path), metadata)
    Path(path).chmod(0o644)  # safetensors writes 0600; the file ships to every user


def read_metadata(path, what: str, writer: str) -> dict:
    """The metadata at `path` with "recipe" and "results" decoded; `what` names the weights
    and `writer` the function that writes them, for the errors."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}; `make translators` writes them")
    with safe_open(str(path), "pt") as f:
        metadata = dict(f.metadata() or {})
    try:
        return {**metadata, "recipe": json.loads(metadata["recipe"]),
                "results": json.loads(metadata["results"])}
    except (KeyError, json.JSONDecodeError):
        raise ValueError(f"{path} has no recipe or results in its metadata: it was not "
                         f"written by {writer}") from None


def require_current(path, metadata: dict, recipe: dict, whose: str, data_sha256: str,
                    data: str) -> None:
    """Refuse weights at `path` trained with another recipe than `recipe` (`whose` recipe, as
    the error names it) or on other data than today's (`data_sha256`; `data` says what the
    data is, for the error): the fix is the same for every shipped file, `make translators`."""
    today = json.loads(json.dumps(recipe))
    if metadata["recipe"] != today:
        raise ValueError(f"{path} was trained with the recipe {metadata['recipe']}, but "
                         f"{whose} is now {today}: run `make translators` to train and write "
                         f"the weights again")
    if metadata.get("data_sha256") != data_sha256:
        raise ValueError(f"{path} was trained on {data}: run `make translators` to train and "
                         f"write the weights again")


def load_variant(path, name: str, model: nn.Module) -> list[float]:
    """Load variant `name`'s weights from `path` into `model` (built with today's sizes) and
    return its training loss per step; a ValueError if the file lacks a weight or holds one
    of another shape."""
    prefix = f"{name}/"
    state = {k[len(prefix):]: v for k, v in load_file(str(path)).items() if k.startswith(prefix)}
    loss = state.pop(".loss", None)
    expected = model.state_dict()
    if loss is None or set(state) != set(expected) or any(
            state[k].shape != expected[k].shape for k in expected):
        raise ValueError(f"{path} does not hold the weights of a {name!r} model of today's "
                         f"sizes: run `make translators` to write them again")
    model.load_state_dict(state)
    return loss.tolist()
