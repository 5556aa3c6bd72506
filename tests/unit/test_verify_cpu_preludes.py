"""Tier 2's precompiled preludes are built once, however many threads and processes ask at once."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import threading
import time
from pathlib import Path

from cuset_core.verify.cpu import build
from cuset_core.verify.cpu.build import PCH_NAME, PRELUDES


def test_threads_and_processes_asking_for_one_prelude_at_once_build_it_once(tmp_path, monkeypatch):
    # A service's workers that start verifying together each built every prelude side by side;
    # the full one is 1.4 GB of g++, and 18 at once ran a 24 GB machine out of memory.
    journal = tmp_path / "journal"
    folder = tmp_path / "pch" / "full-0123456789abcdef"

    def build_slowly(chain, target: Path, prelude):
        with journal.open("a") as f:
            f.write("start\n")
        time.sleep(0.3)
        target.mkdir(parents=True)
        (target / (PCH_NAME + ".gch")).write_text("built")
        with journal.open("a") as f:
            f.write("end\n")
        return target

    monkeypatch.setattr(build, "_build_prelude", build_slowly)

    def ask_from_two_threads() -> None:
        threads = [threading.Thread(target=build._prepare, args=(None, folder, PRELUDES[-1])) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    processes = [multiprocessing.get_context("fork").Process(target=ask_from_two_threads) for _ in range(2)]
    for process in processes:
        process.start()
    ask_from_two_threads()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0

    assert journal.read_text().splitlines() == ["start", "end"], "built more than once, or side by side"
    assert (folder / (PCH_NAME + ".gch")).read_text() == "built"
    assert sorted(os.listdir(folder.parent)) == [folder.name, f"{folder.name}.lock"]


ADD_KERNEL = (Path(__file__).parent / "cpu_cases" / "add_kernel.cu").read_text()


def test_an_extension_build_compiles_on_the_bridges_precompiled_prelude(tmp_path):
    # A macro defined on g++'s command line that the prelude's headers mention (it was
    # TORCH_EXTENSION_NAME) makes g++ parse the whole prelude again, about a second per build,
    # and -w hid its warning. The build command, warnings on, must use the bridge's .gch (the
    # light and full preludes get the same command line; a unit on them costs 8-12 s of g++).
    unit = build.translation_unit("prelude_ext", ADD_KERNEL, "", ["run"])
    source = tmp_path / "prelude_ext.cpp"
    source.write_text(unit)
    bridge = build.prepare_preludes()[0]
    assert build.prelude_named(bridge).bridge
    command = [
        flag for flag in build.compile_command(source, tmp_path / "o.o", bridge, build.toolchain()) if flag != "-w"
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not used because" not in done.stderr, done.stderr[:600]
