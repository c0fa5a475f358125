"""The spark-submit path's driver class archive: written by the first run, mapped by later
ones, kept only from a JVM that exited normally; and the package zip the job imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mirrorflow.spark import submit


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(submit, "jvm_dir", lambda: tmp_path)
    return tmp_path / "class-archive"


def test_the_first_run_writes_the_archive_and_later_runs_map_it(folder: Path) -> None:
    first = submit.class_archive("local[*]")
    assert first.fresh is not None and first.fresh.parent == folder
    (folder / "spark-driver-0123456789abcdef.jsa").write_bytes(b"of an earlier JDK")
    assert first.java_option == f"-XX:ArchiveClassesAtExit={first.fresh}"
    assert submit.submit_conf(first)["spark.driver.extraJavaOptions"] == first.java_option
    first.fresh.write_bytes(b"archive")  # what the JVM writes as it exits
    first.settle(exited_normally=True)
    assert [p.name for p in folder.iterdir()] == [first.path.name]

    later = submit.class_archive("local[2]")
    assert (later.path, later.fresh) == (first.path, None)
    assert later.java_option == f"-XX:SharedArchiveFile={first.path}"
    later.settle(exited_normally=True)
    assert first.path.read_bytes() == b"archive"


def test_an_archive_from_a_failed_run_is_dropped(folder: Path) -> None:
    with pytest.raises(RuntimeError, match="the job failed"), \
            submit.driver_class_archive("local[*]") as failed:
        failed.fresh.write_bytes(b"half an archive")
        raise RuntimeError("the job failed")
    assert list(folder.iterdir()) == []
    with submit.driver_class_archive("local[*]") as kept:
        kept.fresh.write_bytes(b"archive")
    assert [p.name for p in folder.iterdir()] == [kept.path.name]


def test_a_kept_archive_removes_what_killed_runs_left_behind(folder: Path) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    fresh = submit.class_archive("local[*]")
    killed = folder / f"{fresh.path.stem}.{ended.pid}.writing"
    writing = folder / f"{fresh.path.stem}.{os.getppid()}.writing"  # a live process's
    for partial in (killed, writing):
        partial.write_bytes(b"half an archive")
    fresh.fresh.write_bytes(b"archive")
    fresh.settle(exited_normally=True)
    assert sorted(p.name for p in folder.iterdir()) == sorted([fresh.path.name, writing.name])


def test_a_driver_elsewhere_gets_no_archive(folder: Path) -> None:
    assert submit.class_archive("yarn") is None
    assert submit.class_archive("spark://master:7077") is None
    assert "spark.driver.extraJavaOptions" not in submit.submit_conf(None)


def test_the_job_imports_mirrorflow_from_the_zip_as_bytecode(tmp_path: Path) -> None:
    """Every module of the zip has its source and this Python's bytecode; a fresh
    interpreter importing from the zip loads the bytecode (no compiling in the driver or in
    any worker), and the source is still there for tracebacks."""
    import zipfile

    from mirrorflow.spark.session import PACKAGE_DIR, package_zip

    archive = package_zip(tmp_path)
    names = set(zipfile.ZipFile(archive).namelist())
    modules = {f"mirrorflow/{p.relative_to(PACKAGE_DIR).as_posix()}"
               for p in PACKAGE_DIR.rglob("*.py")}
    assert "mirrorflow/spark/mirror.py" in modules
    assert names == modules | {m[:-3] + ".pyc" for m in modules}
    assert [p.name for p in tmp_path.iterdir()] == ["mirrorflow.zip"]
    probe = ("import inspect, sys; sys.path.insert(0, sys.argv[1])\n"
             "import mirrorflow.spark.mirror as m\n"
             "print(m.__file__)\n"
             "print(inspect.getsource(m.worker_error).splitlines()[0])\n")
    done = subprocess.run([sys.executable, "-c", probe, str(archive)], capture_output=True,
                          text=True, check=True, cwd=tmp_path)
    loaded, quoted = done.stdout.splitlines()
    assert loaded == f"{archive}/mirrorflow/spark/mirror.pyc"
    assert quoted == "def worker_error(exc: Exception) -> MirrorflowError:"
