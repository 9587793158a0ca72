"""The local folder backend (wire/storage/local.py) on a real folder: puts, gets and URLs, refused keys and links
out of the tree, and writes that are atomic. The other backend is tests/test_storage_s3.py; what every backend
shares (the key check, the choice of backend) is tests/test_storage_common.py."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import pytest

from pipeline.errors import InputError
from wire import errors as codes
from wire import storage as st
from wire.errors import BAD_KEY, TransientError
from wire.storage import LocalStorage, ObjectNotFoundError
from tests.bad_keys import BAD_KEYS

# -- local folder ----------------------------------------------------------------------------------


def test_local_put_get_exists_url(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path, "ttsfarm")
    assert isinstance(store, st.Storage)
    assert not store.exists("jobs/1/audio.wav")
    url = store.put("jobs/1/audio.wav", b"RIFF-data", "audio/wav")
    assert url == store.url("jobs/1/audio.wav")
    assert url.startswith("file://")
    path = Path(url2pathname(urlparse(url).path))
    assert path == tmp_path.resolve() / "ttsfarm" / "jobs" / "1" / "audio.wav"
    assert path.read_bytes() == b"RIFF-data"
    assert store.exists("jobs/1/audio.wav")
    assert store.get("jobs/1/audio.wav") == b"RIFF-data"
    assert store.presigned_url("jobs/1/audio.wav") is None


def test_local_get_missing_is_a_key_error(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path, "p")
    with pytest.raises(KeyError):
        store.get("nope.wav")
    with pytest.raises(ObjectNotFoundError) as err:
        store.get("nope.wav")
    assert err.value.code == codes.OBJECT_NOT_FOUND
    store.put("dir/x.wav", b"x", "audio/wav")
    with pytest.raises(ObjectNotFoundError):
        store.get("dir")  # a folder is not an object


@pytest.mark.parametrize("key", BAD_KEYS)
def test_local_refuses_traversal_and_writes_nothing(tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    store = LocalStorage(root, "prefix")
    for op in (lambda: store.put(key, b"evil", "audio/wav"), lambda: store.get(key), lambda: store.exists(key)):
        with pytest.raises(InputError) as err:
            op()
        assert err.value.code == BAD_KEY
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_local_refuses_symlink_out_of_the_tree(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = LocalStorage(tmp_path / "root", "p")
    store.base.mkdir(parents=True)
    (store.base / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InputError) as err:
        store.put("link/evil.wav", b"evil", "audio/wav")
    assert err.value.code == BAD_KEY
    assert list(outside.iterdir()) == []


def test_local_write_is_atomic_replace_and_leaves_no_temp_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStorage(tmp_path, "p")
    store.put("a/b.wav", b"old", "audio/wav")
    target = store.path("a/b.wav")
    calls: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        calls.append((str(src), str(dst)))
        assert Path(dst).read_bytes() == b"old"  # the target is untouched until the rename
        assert Path(src).read_bytes() == b"new"
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    store.put("a/b.wav", b"new", "audio/wav")
    assert len(calls) == 1
    assert Path(calls[0][0]).parent == target.parent  # temp file in the same folder (same file system)
    assert calls[0][1] == str(target)
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["b.wav"]


def test_local_failed_write_keeps_old_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStorage(tmp_path, "p")
    store.put("a/b.wav", b"old", "audio/wav")

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(TransientError) as err:
        store.put("a/b.wav", b"new" * 1000, "audio/wav")
    assert err.value.retryable
    assert store.get("a/b.wav") == b"old"
    assert sorted(p.name for p in store.path("a/b.wav").parent.iterdir()) == ["b.wav"]


def test_local_readers_never_see_a_partial_object(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path, "p")
    payloads = [bytes([i]) * (512 * 1024) for i in range(2)]
    store.put("big.pcm", payloads[0], "audio/L16")
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            data = store.get("big.pcm")
            seen.add(data[:1] + data[-1:] + len(data).to_bytes(4, "little"))
            assert data in payloads

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(60):
            store.put("big.pcm", payloads[i % 2], "audio/L16")
    finally:
        stop.set()
        thread.join()
    assert seen <= {p[:1] + p[-1:] + len(p).to_bytes(4, "little") for p in payloads}
