"""`spec.data.resize` and `spec.data.crop`: rectangular images (height != width, any even
size), and how the built-in image networks fit them.

Every decoded image is resized to `resize` (height x width, aspect not kept), then cut to
`crop`, centred (from the image as decoded when there is no `resize`). Either one replaces
the model's square `imageSize`: the training images are `crop` (else `resize`) in shape.

The networks follow that shape: DCGAN's (and ACGAN's) generator starts from a grid of
(height, width) / 2^n, n the most stride-2 stages that keep both sides whole and the
smaller side of the grid at least 4 (4x4 for a square power of two, as before); pix2pix's
U-Net halves both sides as often as they stay whole (down to 1x1 for a square power of
two). So both sides must be even: one stage at least.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from kubegan_api.base import FIELD_PROBLEMS, ApiModel
from kubegan_api.cel import Rule, cel_rules, check

MIN_SIDE = 8
MAX_SIDE = 1024
# The most pixels one image may have, per model (the largest square each one's imageSize
# allows, as model_options bounds it).
MAX_PIXELS = {"dcgan": 256 * 256, "acgan": 256 * 256, "pix2pix": 512 * 512, "custom": 512 * 512}
DCGAN_MIN_START = 4
MAX_DCGAN_WIDTH = 2048  # as model_options: the widest layer's channels

Problem = tuple[str, str]  # (path relative to the spec, reason)


EVEN_RULE = Rule(
    "",
    "height and width must be even (the networks halve them at least once)",
    "self.height % 2 == 0 && self.width % 2 == 0",
    lambda s: s.height % 2 == 0 and s.width % 2 == 0,
)


class ImageShape(ApiModel):
    model_config = ApiModel.model_config | cel_rules(EVEN_RULE)

    height: int = Field(ge=MIN_SIDE, le=MAX_SIDE, description="Pixels, even.")
    width: int = Field(ge=MIN_SIDE, le=MAX_SIDE, description="Pixels, even.")

    @model_validator(mode="after")
    def _even(self) -> ImageShape:
        check(self, (EVEN_RULE,))
        return self


# On DataSpec: a crop is cut from the resized image, so it must fit inside it.
CROP_RULES = (
    Rule(
        ".crop",
        "crop must fit inside resize (height and width at most resize's)",
        "!has(self.crop) || !has(self.resize) || "
        "(self.crop.height <= self.resize.height && self.crop.width <= self.resize.width)",
        lambda d: (
            d.crop is None
            or d.resize is None
            or (d.crop.height <= d.resize.height and d.crop.width <= d.resize.width)
        ),
    ),
)


def hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """(height, width) of a network's image size: an int is a square (the size every network
    took before rectangles, which code building the networks directly still passes)."""
    if isinstance(size, int):
        return size, size
    height, width = size
    return int(height), int(width)


def _halvings(n: int) -> int:
    return (n & -n).bit_length() - 1  # times n halves and stays whole


def dcgan_stages(height: int, width: int) -> int:
    """DCGAN's stride-2 stages for an image of height x width (module docstring)."""
    fit = int(math.log2(min(height, width) // DCGAN_MIN_START)) if min(height, width) >= 4 else 0
    return max(0, min(_halvings(height), _halvings(width), fit))


def dcgan_start(height: int, width: int) -> tuple[int, int]:
    """The generator's first grid (and the discriminator's last)."""
    n = dcgan_stages(height, width)
    return height >> n, width >> n


def unet_levels(height: int, width: int) -> int:
    """pix2pix U-Net levels: halvings of both sides down to at least 1 pixel."""
    return max(1, min(_halvings(height), _halvings(width)))


def frame_shape(data: Any) -> tuple[int, int] | None:
    """(height, width) of the training images when `data` (a DataSpec) sets them."""
    shape = data.crop or data.resize
    return None if shape is None else (shape.height, shape.width)


def frame_problems(model: str, options: Mapping[str, Any], data: Any) -> list[Problem]:
    """Why the model cannot train on data.resize/crop's images, as (path, reason) pairs."""
    shape = frame_shape(data)
    if shape is None:
        return []
    which = ".data.crop" if data.crop is not None else ".data.resize"
    h, w = shape
    problems: list[Problem] = []
    if "imageSize" in options:
        problems.append(
            (".model.options.imageSize", f"not with {which[1:]}, which sets the image shape")
        )
    if model == "custom" and options.get("dataKind") == "showers":
        problems.append((which, "is for images; dataKind showers trains on showers"))
    limit = MAX_PIXELS.get(model)
    if limit is not None and h * w > limit:
        problems.append((which, f"{h}x{w} is more pixels than {model} takes ({limit})"))
    if model in ("dcgan", "acgan"):
        n = dcgan_stages(h, w)
        for name in ("ngf", "ndf"):
            widest = int(options.get(name, 64)) * 2 ** max(0, n - 1)
            if widest > MAX_DCGAN_WIDTH:
                problems.append(
                    (
                        f".model.options.{name}",
                        f"its widest layer would have {widest} channels at {h}x{w} "
                        f"({n} stages), more than {MAX_DCGAN_WIDTH}",
                    )
                )
    if model == "pix2pix":
        layers = int(options.get("nLayersD", 3))
        if min(h, w) < 4 * 2**layers:
            problems.append((which, f"nLayersD {layers} needs both sides >= {4 * 2**layers}"))
    return problems


def check_frame(model: Any, data: Any) -> None:
    """Raise the frame_problems of a ModelSpec and a DataSpec as the spec's field errors."""
    problems = frame_problems(model.name.value, model.options, data)
    if problems:
        raise PydanticCustomError(
            FIELD_PROBLEMS,
            "{message}",
            {"rules": problems, "message": "; ".join(f"{p}: {r}" for p, r in problems)},
        )
