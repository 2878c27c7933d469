"""WebDataset tar shards as hostile input (data/webdataset.py, data/tar_plan.py) and
`kubegan data pack` (data/pack.py): every refusal one line naming the shard, and packing
deterministic. No training here (test_webdataset_training.py trains)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from kubegan_operator.entry.cli import main as kubegan
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data import webdataset
from kubegan_trainer.data.tar_plan import parse_tar, tar_plan, tar_source
from kubegan_trainer.data.webdataset import tar_samples
from PIL import Image

FIELD = "spec.data.path"


def png(value: int = 128, size: tuple[int, int] = (6, 4)) -> bytes:
    out = io.BytesIO()
    Image.new("L", size, value).save(out, format="PNG")
    return out.getvalue()


def tar_of(*members: tuple[str, bytes] | tarfile.TarInfo) -> bytes:
    """A tar of (name, bytes) regular members, or of TarInfo entries as given (links...)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tar.addfile(info, io.BytesIO(m[1]))
    return out.getvalue()


def special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def refusal(raw: bytes, name: str = "part-0.tar") -> str:
    with pytest.raises(TrainerError) as err:
        tar_samples(raw, name, FIELD)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{FIELD}: {name}")
    return line


def test_a_shard_groups_its_members_by_key_in_archive_order() -> None:
    raw = tar_of(
        ("b/000001.png", png(1)),
        ("b/000001.cls", b"3"),
        ("b/000001.meta.json", b"{}"),
        ("000000.jpg", png(2)),
    )
    samples = tar_samples(raw, "s.tar", FIELD)
    assert [s.key for s in samples] == ["b/000001", "000000"]
    assert sorted(samples[0].members) == ["cls", "meta.json", "png"]
    assert samples[1].members["jpg"] == png(2)


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (special("000000.png", tarfile.SYMTYPE, "/etc/passwd"), "is a link"),
        (special("000000.png", tarfile.LNKTYPE, "x.png"), "is a link"),
        (special("000000.png", tarfile.FIFOTYPE), "is not a regular file"),
        (special("000000.png", tarfile.CHRTYPE), "is not a regular file"),
        (special("000000.png", tarfile.BLKTYPE), "is not a regular file"),
        (("../escape.png", b"x"), "has a path outside the archive"),
        (("a/../../escape.png", b"x"), "has a path outside the archive"),
        (("/etc/abs.png", b"x"), "has a path outside the archive"),
        (("README", b"x"), "has no extension"),
    ],
)
def test_members_that_are_not_plain_sample_files_are_refused(
    member: tuple[str, bytes] | tarfile.TarInfo, why: str
) -> None:
    line = refusal(tar_of(("000001.png", png()), member))
    assert why in line


def test_a_member_over_the_size_bound_is_refused_before_it_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(webdataset, "IMAGE_MAX_BYTES", 1000)
    line = refusal(tar_of(("000000.png", b"x" * 1001)))
    assert "member '000000.png' is 1001 bytes, more than a member may be (1000)" in line


def test_damaged_archives_are_refused_in_one_line() -> None:
    whole = tar_of(("000000.png", png()), ("000001.png", png(9)))
    assert "is not a tar archive" in refusal(b"this is not a tar file at all" * 40)
    assert "is not a tar archive" in refusal(gzip.compress(whole))  # only plain .tar
    assert "is not a tar archive" in refusal(b"")
    # Cut inside a member's data, at a member boundary, and with the end blocks gone
    # (each member is one header block and one data block).
    for cut in (700, 1024, 2048):
        assert "truncated" in refusal(whole[:cut]), cut
    assert tar_samples(whole[:3072], "s.tar", FIELD)  # the end blocks are all it needs
    assert "holds no samples" in refusal(tar_of())


def test_repeated_members_and_samples_without_an_image_are_refused() -> None:
    line = refusal(tar_of(("000000.png", png()), ("000000.png", png(3))))
    assert "member '000000.png' appears twice" in line
    samples = tar_samples(tar_of(("000000.cls", b"1")), "s.tar", FIELD)
    with pytest.raises(TrainerError, match=r"sample '000000' has no image \(one of .png"):
        webdataset.sample_image(samples[0], "s.tar", FIELD)


def _parse(raw: bytes, classes: int = 2, expected: dict | None = None) -> dict:
    return parse_tar(
        "s.tar", raw, kind="images", frame=4, channels=1, classes=classes,
        direction="AtoB", field=FIELD, expected=expected or {},
    )  # fmt: skip


def test_labels_images_and_the_index_are_checked_when_a_shard_is_read() -> None:
    good = tar_of(("0.png", png(0)), ("0.cls", b"1"), ("1.png", png(255)), ("1.cls", b"0\n"))
    arrays = _parse(good)
    assert arrays["label"].tolist() == [1, 0]
    assert arrays["image"].shape == (2, 1, 4, 4)
    assert arrays["image"][0].max() == -1.0 and arrays["image"][1].min() == 1.0
    for raw, why in (
        (tar_of(("0.png", png())), "sample '0' has no .cls label (the set is labelled)"),
        (tar_of(("0.png", png()), ("0.cls", b"2")), "sample '0': .cls is not a class index"),
        (tar_of(("0.png", png()), ("0.cls", b"-1")), "sample '0': .cls is not a class index"),
        (tar_of(("0.png", b"not a png"), ("0.cls", b"0")), "s.tar:0.png is not a readable image"),
    ):
        with pytest.raises(TrainerError) as err:
            _parse(raw)
        assert why in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(
        TrainerError, match=r"holds 2 samples, its index kubegan-shards\.json says 3"
    ):
        _parse(good, expected={"s.tar": 3})
    assert "label" not in _parse(tar_of(("0.png", png()), ("0.cls", b"9")), classes=0)


def test_paired_samples_split_as_a_paired_folder_does() -> None:
    left, right = Image.new("RGB", (6, 4), (255, 0, 0)), Image.new("RGB", (6, 4), (0, 0, 255))
    pair = Image.new("RGB", (12, 4))
    pair.paste(left, (0, 0))
    pair.paste(right, (6, 0))
    out = io.BytesIO()
    pair.save(out, format="PNG")
    raw = tar_of(("0.png", out.getvalue()))
    for direction, red in (("AtoB", "a"), ("BtoA", "b")):
        arrays = parse_tar(
            "p.tar", raw, kind="paired", frame=4, channels=3, classes=0,
            direction=direction, field=FIELD, expected={},
        )  # fmt: skip
        assert arrays[red].shape == (1, 3, 4, 4)
        assert arrays[red][0, 0].min() == 1.0 and arrays[red][0, 2].max() == -1.0


def digits_folder(root: Path, count: int) -> Path:
    """The first `count` scikit-learn digits as 8x8 PNGs, one sub-folder per class."""
    from kubegan_trainer.data.digits import _raw_digits

    images, labels = _raw_digits()
    for i in range(count):
        folder = root / str(labels[i])
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((images[i] * 255 / 16).astype(np.uint8)).save(folder / f"{i:04d}.png")
    return root


def test_pack_writes_the_same_bytes_twice_and_the_trainer_reads_them_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = digits_folder(tmp_path / "digits", 30)
    for out in ("a", "b"):
        assert pack(str(src), str(tmp_path / out), "--max-count", "8") == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"30 samples in 4 shard(s) in {tmp_path / 'a'}"
    )
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["kubegan-shards.json", *(f"shard-00000{i}.tar" for i in range(4))]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    index = json.loads((tmp_path / "a" / "kubegan-shards.json").read_bytes())
    assert index["files"] == {f"shard-00000{i}.tar": n for i, n in enumerate((8, 8, 8, 6))}
    assert index["classes"] == [str(c) for c in range(10)]
    # Shards mix the classes (dealt from the seed), and every image is there once.
    plan = tar_plan(tar_source(str(tmp_path / "a")), 7, "images", {"channels": None}, 8)
    assert plan.head().num_classes == 10
    batch = next(plan.rank_batches(0, 1, 0, 30, 0, 1))
    assert sorted(batch["index"].tolist()) == list(range(30))
    first = plan.names[0]
    assert len(set(plan.parse(first, plan.source.read(first))["label"].tolist())) > 3


def pack(*args: str) -> int:
    """`kubegan data pack ARGS`' exit code (argparse's refusals exit through SystemExit)."""
    try:
        return kubegan(["data", "pack", *args])
    except SystemExit as stop:
        return int(stop.code or 0)


def test_pack_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = digits_folder(tmp_path / "digits", 4)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "old.tar").write_bytes(b"")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.png").write_bytes(b"not an image")
    cases = [
        ([str(tmp_path / "missing"), str(tmp_path / "o1")], "is not a folder of images"),
        ([str(src), str(tmp_path / "taken")], "already holds old.tar; use an empty place"),
        ([str(tmp_path / "bad"), str(tmp_path / "o2")], "x.png is not a readable image"),
        ([str(src), str(tmp_path / "o3"), "--shard-size", "12parsecs"], "--shard-size"),
        ([str(src), str(tmp_path / "o4"), "--shard-size", "1K"], "must be 4 KiB to"),
        ([str(src), str(tmp_path / "o5"), "--max-count", "0"], "--max-count"),
    ]
    for args, why in cases:
        assert pack(*args) == 2, args
        err = capsys.readouterr().err.strip()
        assert why in err and "\n" not in err and "Traceback" not in err, err
    assert not (tmp_path / "o2").exists() or not any((tmp_path / "o2").iterdir())
