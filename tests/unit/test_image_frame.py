"""spec.data.resize / spec.data.crop (kubegan_api.image_frame): how the networks fit a
rectangular image, and the combinations `kubegan validate` (and so the trainer's config)
refuses, one line each, with the path that is wrong."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubegan_api.image_frame import dcgan_stages, dcgan_start, unet_levels
from kubegan_api.sections import TrainerConfig
from kubegan_operator.api.loading import _describe
from pydantic import ValidationError


@pytest.mark.parametrize(
    ("hw", "stages", "start", "levels"),
    [
        ((32, 32), 3, (4, 4), 5),  # a square power of two: as before, 4x4 and down to 1x1
        ((256, 256), 6, (4, 4), 8),
        ((8, 8), 1, (4, 4), 3),
        ((24, 40), 2, (6, 10), 3),
        ((48, 80), 3, (6, 10), 4),
        ((12, 20), 1, (6, 10), 2),
        ((16, 10), 1, (8, 5), 1),
    ],
)
def test_the_networks_halve_both_sides_while_they_stay_whole(
    hw: tuple[int, int], stages: int, start: tuple[int, int], levels: int
) -> None:
    assert (dcgan_stages(*hw), dcgan_start(*hw), unet_levels(*hw)) == (stages, start, levels)


BASE: dict[str, Any] = {
    "jobName": "t",
    "framework": "pytorch",
    "model": {"name": "dcgan", "options": {"ngf": 64}},
    "data": {"source": "files", "path": "/data/img", "resize": {"height": 24, "width": 40}},
}


def problems(**patch: Any) -> list[str]:
    job = copy.deepcopy(BASE)
    for section, fields in patch.items():
        job[section] = {**job[section], **fields}
    try:
        TrainerConfig.model_validate(job)
    except ValidationError as err:
        # `kubegan validate` puts "spec" where a bare config has "(document)".
        return [line.removeprefix("(document).") for e in err.errors() for line in _describe(e)]
    return []


def test_rectangular_shapes_the_models_can_build_are_accepted() -> None:
    assert problems() == []
    assert problems(data={"crop": {"height": 16, "width": 40}}) == []
    assert problems(model={"name": "pix2pix", "options": {"nLayersD": 2}}) == []
    assert problems(model={"name": "acgan", "options": {}}) == []


@pytest.mark.parametrize(
    ("patch", "line"),
    [
        (
            {"model": {"name": "dcgan", "options": {"imageSize": 32}}},
            "model.options.imageSize: not with data.resize, which sets the image shape",
        ),
        (
            {"data": {"crop": {"height": 32, "width": 40}}},
            "data.crop: crop must fit inside resize (height and width at most resize's)",
        ),
        (
            {"data": {"resize": {"height": 24, "width": 41}}},
            "data.resize: height and width must be even (the networks halve them at least once)",
        ),
        (
            {"data": {"resize": {"height": 6, "width": 40}}},
            "data.resize.height: input should be greater than or equal to 8",
        ),
        (
            {"model": {"name": "pix2pix", "options": {"nLayersD": 3}}},
            "data.resize: nLayersD 3 needs both sides >= 32",
        ),
        (
            {"model": {"options": {"ngf": 512}}, "data": {"resize": {"height": 128, "width": 192}}},
            "model.options.ngf: its widest layer would have 8192 channels at 128x192 (5 stages)",
        ),
        (
            {"data": {"resize": {"height": 256, "width": 512}}},
            "data.resize: 256x512 is more pixels than dcgan takes (65536)",
        ),
    ],
)
def test_combinations_the_models_cannot_build_are_refused(patch: dict, line: str) -> None:
    found = problems(**patch)
    assert len(found) == 1 and found[0].startswith(line), found


def test_a_square_size_may_still_be_one_int() -> None:
    """Code that builds the networks directly (tests, user models reusing kubegan's) passes
    the square size every network took before rectangles."""
    from kubegan_api.image_frame import dcgan_stages, hw, unet_levels

    assert hw(32) == (32, 32) and hw((24, 40)) == (24, 40)
    assert dcgan_stages(*hw(64)) == dcgan_stages(64, 64)
    assert unet_levels(*hw(256)) == 8
