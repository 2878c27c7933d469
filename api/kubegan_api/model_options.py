"""`spec.model.options`: every built-in model's options, declared once.

One table says, for each model, the options it reads: name, type, range, default and a
one-line meaning. `kubegan validate` and the operator check a job against it (through
`sections.ModelSpec`), the CRD's schema and CEL rules are generated from it
(`kubegan_operator.api.crd`), and the trainer's builders read their settings through it
(`kubegan_trainer.base.model_settings`). So a
value `validate` accepts is one every worker can build and train: the ranges are where the
architectures stop working (powers of two, enough pixels for the discriminator's strides)
or where memory stops being sane (widths, latent sizes, synthetic data held in memory).

A custom model's options are its own: only those kubegan itself reads for it (data kind,
image size, sample count, channels, ...) are checked, and other names pass untouched.
An option given as null is unset (the apiserver prunes nulls of declared fields too).

Pure Python: no pydantic, torch or tensorflow, so the operator can import it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

OPTIONS_PATH = "spec.model.options"
# 3DGAN loss weights [BCE, MAPE(energy), MAE(angle), MAPE(ECAL)], as the public code has.
GAN3D_LOSS_WEIGHTS = (3.0, 0.1, 25.0, 0.1)
# Synthetic samples generated when `numSamples` is not set, by the kind of data.
DEFAULT_SAMPLES = {"images": 2048, "paired": 64, "showers": 512}
# dcgan/acgan double their width at every stride-2 stage: the widest layer has
# ngf (ndf) x imageSize/8 channels. 2048 is 64 at 256x256; twice that is ~0.5 G parameters.
MAX_DCGAN_WIDTH = 2048
# Synthetic data sets live in memory (as float32) on every worker, and generating one
# needs about twice that at its peak.
SYNTHETIC_DATA_BYTES = 2 * 1024**3
SHOWER_CELLS = 51 * 51 * 25

Problem = tuple[str, str]  # (option name as shown in the path, reason)


class Kind(StrEnum):
    integer = "integer"
    number = "number"
    string = "string"
    numbers = "numbers"  # a list of `length` numbers
    auto_or_bool = "auto-or-boolean"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class Option:
    """One option: `minimum`/`maximum` bound numbers, list items, or a string's length;
    `choices` are the only values allowed (compared with their type: `true` is not 1)."""

    name: str
    kind: Kind
    default: Any
    meaning: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()
    length: int = 0
    power_of_two: bool = False
    default_text: str = ""  # the default in words, where it is not one value

    @property
    def constraint(self) -> tuple[Any, ...]:
        """What the option accepts, without its default and meaning."""
        return (self.kind, self.minimum, self.maximum, self.choices, self.length)

    @property
    def rule(self) -> str:
        """What a value must be, in words: the reason for every refused value, of a wrong
        type or out of range alike. It never quotes the value, so the CRD's CEL rule for it
        carries the very same message."""
        lo, hi = _num(self.minimum or 0), _num(self.maximum or 0)
        if self.power_of_two:
            return f"must be a power of two from {lo} to {hi}"
        if self.choices:
            return "must be one of " + ", ".join(str(c) for c in self.choices)
        if self.kind is Kind.auto_or_bool:
            return "must be auto, true or false"
        if self.kind is Kind.string:
            return (
                f"must be a {'non-empty ' if self.minimum else ''}string of at most {hi} characters"
            )
        if self.kind is Kind.numbers:
            return f"must be a list of {self.length} numbers, each from {lo} to {hi}"
        return (
            f"must be {'an integer' if self.kind is Kind.integer else 'a number'} from {lo} to {hi}"
        )

    def _within(self, x: float) -> bool:
        return (self.minimum is None or x >= self.minimum) and (
            self.maximum is None or x <= self.maximum
        )

    def accepts(self, value: Any) -> bool:
        if self.choices:
            return any(type(value) is type(c) and value == c for c in self.choices)
        if self.kind is Kind.auto_or_bool:
            return value == "auto" or isinstance(value, bool)
        if self.kind is Kind.string:
            return isinstance(value, str) and self._within(len(value))
        if self.kind is Kind.numbers:
            return (
                isinstance(value, list)
                and len(value) == self.length
                and all(_is_number(x) and self._within(x) for x in value)
            )
        if self.kind is Kind.integer:
            return _is_int(value) and self._within(value)
        return _is_number(value) and self._within(value)


Rule = Callable[[str, Mapping[str, Any]], list[Problem]]


@dataclass(frozen=True)
class ModelOptions:
    """A model's options. `data_kind` is empty for custom (its `dataKind` option says);
    `open` models take other names too (a custom factory's own options). `rules` relate
    several options (checked once each option is valid on its own)."""

    model: str
    data_kind: str
    options: tuple[Option, ...]
    rules: tuple[Rule, ...] = ()
    open: bool = False

    def get(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def names(self) -> list[str]:
        return sorted(o.name for o in self.options)


# ---- the options ----------------------------------------------------------------------------


def _int(name: str, default: int, lo: int, hi: int, meaning: str) -> Option:
    return Option(name, Kind.integer, default, meaning, lo, hi)


def _number(name: str, default: float, lo: float, hi: float, meaning: str) -> Option:
    return Option(name, Kind.number, default, meaning, lo, hi)


def _one_of(name: str, default: Any, choices: tuple[Any, ...], meaning: str) -> Option:
    kind = Kind.string if isinstance(choices[0], str) else Kind.integer
    return Option(name, kind, default, meaning, choices=choices)


def _power_of_two(name: str, default: int, lo: int, hi: int, meaning: str) -> Option:
    choices = tuple(2**k for k in range(lo.bit_length() - 1, hi.bit_length()))
    return Option(name, Kind.integer, default, meaning, lo, hi, choices, power_of_two=True)


def _samples(kind: str) -> Option:
    return _int(
        "numSamples", DEFAULT_SAMPLES[kind], 1, 1_000_000,
        "synthetic data: how many samples to generate (held in memory, at most 2 GiB)",
    )  # fmt: skip


CHANNELS_LAST = Option(
    "channelsLast", Kind.auto_or_bool, "auto",
    "PyTorch: channels-last memory format for the networks and inputs (auto: on CUDA only)",
)  # fmt: skip
CHANNELS = Option(
    "channels", Kind.integer, None, "image channels: 1 (grey) or 3 (RGB)",
    choices=(1, 3), default_text="synthetic: 1; files: the first image's",
)  # fmt: skip
DIRECTION = _one_of(
    "direction", "AtoB", ("AtoB", "BtoA"), "paired images: AtoB learns A -> B, BtoA the reverse"
)
HELD_OUT_PATH = Option(
    "heldOutPath", Kind.string, "",
    "paired files: a folder of pairs never trained on, for the quality score (optional)",
    maximum=4096,
)  # fmt: skip
ANGLE_KEY = Option(
    "angleKey", Kind.string, "theta", "showers from files: the HDF5 dataset of incidence angles",
    minimum=1, maximum=256,
)  # fmt: skip

# Tables, not code: one option per entry, `# fmt: skip` keeps them that way.
DCGAN_OPTIONS = (
    _power_of_two("imageSize", 32, 8, 256, "side of the square images in pixels"),
    _int("latentDim", 100, 1, 1024, "length of the generator's noise vector"),
    _int("ngf", 64, 1, 1024, "generator width: its last hidden layer's channels, doubling inwards"),
    _int("ndf", 64, 1, 1024, "discriminator width: its first layer's channels, doubling inwards"),
    CHANNELS,
    _samples("images"),
    CHANNELS_LAST,
)  # fmt: skip

PIX2PIX_OPTIONS = (
    _power_of_two("imageSize", 256, 8, 512, "side of the square images in pixels"),
    _int("ngf", 64, 1, 128, "U-Net width: channels of its outer level (x8 at most inside)"),
    _int("ndf", 64, 1, 128, "PatchGAN width: channels of its first layer (x8 at most)"),
    _int("nLayersD", 3, 1, 6, "PatchGAN stride-2 layers (3: 70x70 patches); imageSize >= 4 x 2^n"),
    _number("lambdaL1", 100.0, 0, 10_000, "weight of the L1 loss against the target"),
    DIRECTION,
    HELD_OUT_PATH,
    _samples("paired"),
    CHANNELS_LAST,
)  # fmt: skip

GAN3D_OPTIONS = (
    _int("latentDim", 256, 3, 1024, "generator input: energy, angle and (latentDim - 2) noise"),
    Option(
        "lossWeights", Kind.numbers, GAN3D_LOSS_WEIGHTS,
        "loss weights [BCE, MAPE(energy), MAE(angle), MAPE(ECAL sum)]", 0, 1000, length=4,
    ),
    _number("labelFlip", 0.05, 0, 0.5, "fraction of discriminator labels flipped"),
    _number("power", 0.85, 0.1, 1, "exponent the showers' cells are raised to (D inverts it)"),
    _one_of("size", "full", ("full", "tiny"), "full: CERN 3DGAN; tiny: a stand-in for tests, CPUs"),
    ANGLE_KEY,
    _samples("showers"),
    CHANNELS_LAST,
)  # fmt: skip

# The options kubegan itself reads for a custom model; everything else is the factory's.
CUSTOM_OPTIONS = (
    _one_of("dataKind", "images", ("images", "paired", "showers"), "the data the model trains on"),
    _power_of_two("imageSize", 32, 8, 512, "images and pairs: side of the square images in pixels"),
    Option(
        "latentDim", Kind.integer, None, "a (generator, discriminator) pair: noise length",
        1, 65_536, default_text="the generator's latent_dim, else 100",
    ),
    CHANNELS,
    DIRECTION,
    HELD_OUT_PATH,
    ANGLE_KEY,
    Option(
        "numSamples", Kind.integer, None, _samples("images").meaning, 1, 1_000_000,
        default_text="images 2048, pairs 64, showers 512",
    ),
    CHANNELS_LAST,
)  # fmt: skip


# ---- rules between options ------------------------------------------------------------------


def data_kind(model: str, options: Mapping[str, Any]) -> str:
    """images, paired or showers: fixed by a built-in model, `dataKind` for custom."""
    return MODELS[model].data_kind or options.get("dataKind") or "images"


def _widest_layer(model: str, values: Mapping[str, Any]) -> list[Problem]:
    """`ngf` and `ndf` at most 2048 x 8 / `imageSize`: the widest layer has ngf (ndf) x
    imageSize/8 channels, at most 2048."""
    size = values["imageSize"]
    limit = MAX_DCGAN_WIDTH * 8 // size
    return [
        (
            name,
            f"at most {limit} with imageSize {size} (the widest layer has {name} x "
            f"imageSize/8 channels, at most {MAX_DCGAN_WIDTH})",
        )
        for name in ("ngf", "ndf")
        if values[name] > limit
    ]


def _patch_fits(model: str, values: Mapping[str, Any]) -> list[Problem]:
    """`imageSize` >= 4 x 2^`nLayersD`."""
    # PatchGAN halves the image nLayersD times, then two 4x4 stride-1 convolutions take
    # two more pixels: anything smaller than 4 x 2^n leaves no patch to score.
    n, size = values["nLayersD"], values["imageSize"]
    if size >= 4 * 2**n:
        return []
    return [("nLayersD", f"{n} layers need imageSize >= {4 * 2**n}, got {size}")]


def _sample_shape(kind: str, values: Mapping[str, Any]) -> tuple[str, int]:
    """Words for one synthetic sample, and its float32 values."""
    if kind == "showers":
        return "51x51x25 showers", SHOWER_CELLS + 3  # + energy, angle, ECAL sum
    size = values["imageSize"]
    if kind == "paired":
        return f"{size}x{size} pairs", 2 * 3 * size * size
    channels = values["channels"] or 1
    return f"{channels}x{size}x{size} images", channels * size * size + 2  # + the label


def _data_fits(model: str, values: Mapping[str, Any]) -> list[Problem]:
    """`numSamples` synthetic samples take at most 2 GiB as float32 (a sample: channels x
    imageSize^2 values for images, 2 x 3 x imageSize^2 for pairs, 51 x 51 x 25 for showers)."""
    kind = data_kind(model, values)
    n = values["numSamples"] or DEFAULT_SAMPLES[kind]
    what, floats = _sample_shape(kind, values)
    limit = SYNTHETIC_DATA_BYTES // (4 * floats)
    if n <= limit:
        return []
    why = "synthetic data is held in memory: at most 2 GiB"
    return [("numSamples", f"at most {limit} {what} ({why})")]


MODELS: dict[str, ModelOptions] = {
    "dcgan": ModelOptions("dcgan", "images", DCGAN_OPTIONS, (_widest_layer, _data_fits)),
    "acgan": ModelOptions("acgan", "images", DCGAN_OPTIONS, (_widest_layer, _data_fits)),
    "pix2pix": ModelOptions("pix2pix", "paired", PIX2PIX_OPTIONS, (_patch_fits, _data_fits)),
    "gan3d": ModelOptions("gan3d", "showers", GAN3D_OPTIONS, (_data_fits,)),
    "custom": ModelOptions("custom", "", CUSTOM_OPTIONS, (_data_fits,), open=True),
}


# ---- checking and reading -------------------------------------------------------------------


def shown(name: str) -> str:
    """An option name as it appears in a one-line path: quoted when it is not a plain name."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]{1,80}", name) else repr(name[:80])


def unknown_reason(model: str) -> str:
    return f"unknown option for model {model}; known: {', '.join(MODELS[model].names())}"


def option_values(table: ModelOptions, options: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of the table: the given value, or the default when unset (or null)."""
    return {
        o.name: o.default if options.get(o.name) is None else options[o.name] for o in table.options
    }


def option_problems(model: str, options: Mapping[str, Any]) -> list[Problem]:
    """Every problem with `options` for `model`, in the order the options were given, then
    those between options: (name, reason) pairs; empty when the options are fine."""
    table = MODELS[model]
    problems: list[Problem] = []
    for name, value in options.items():
        spec = table.get(name)
        if value is None:  # unset, whatever the name
            continue
        if spec is None:
            if not table.open:
                problems.append((shown(name), unknown_reason(model)))
        elif not spec.accepts(value):
            problems.append((name, spec.rule))
    if problems:
        return problems
    values = option_values(table, options)
    return [p for rule in table.rules for p in rule(model, values)]


def problem_lines(problems: list[Problem]) -> list[str]:
    return [f"{OPTIONS_PATH}.{name}: {reason}" for name, reason in problems]


def options_markdown() -> str:
    """The tables of docs/api.md's "Model options" section (a test keeps the two equal)."""
    out: list[str] = []
    groups: dict[tuple[Option, ...], list[ModelOptions]] = {}
    for table in MODELS.values():
        groups.setdefault(table.options, []).append(table)
    for tables in groups.values():
        table = tables[0]
        names = ", ".join(f"`{t.model}`" for t in tables)
        out += [f"### {names} ({table.data_kind or 'any data: `dataKind`'})", ""]
        out += ["| option | accepts | default | meaning |", "|---|---|---|---|"]
        out += [
            f"| `{o.name}` | {o.rule.removeprefix('must be ')} | {_default_cell(o)} | {o.meaning} |"
            for o in table.options
        ]
        out += ["", "Between options:", ""]
        out += [f"- {' '.join((rule.__doc__ or '').split())}" for rule in table.rules]
        if table.open:
            out += ["", "Any other name is the factory's own option, passed to it unchecked."]
        out.append("")
    return "\n".join(out)


def _default_cell(option: Option) -> str:
    return option.default_text or f"`{json.dumps(option.default)}`"
