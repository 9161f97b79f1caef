"""Build step that puts the kernel templates into the wheel.

The top-level templates/ folder stays the one source: build_py copies it into the
build tree as the package data folder cutlass_gen/_templates (the *.j2 templates
and include/qgemm/**/*.h headers), which cutlass_gen/paths.py looks up first. The
copy is made in the build folder only, so a clone never holds a second copy.
Everything else about the package is declared in pyproject.toml.
"""
from pathlib import Path
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
TEMPLATE_PATTERNS = ("*.j2", "*.h", "*.hpp")


class build_py_with_templates(build_py):
    def run(self):
        super().run()
        source = HERE / "templates"
        if not (source / "header.j2").is_file():
            raise SystemExit(f"qgemm build: {source} is missing; build from a clone or an sdist of qgemm")
        # An editable install maps packages to the source tree; its lookups find templates/ there.
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "cutlass_gen" / "_templates"
        if target.exists():
            shutil.rmtree(target)
        copied = 0
        for pattern in TEMPLATE_PATTERNS:
            for path in source.rglob(pattern):
                dest = target / path.relative_to(source)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)
                copied += 1
        self.announce(f"copied {copied} template files into {target}", level=2)


setup(cmdclass={"build_py": build_py_with_templates})
