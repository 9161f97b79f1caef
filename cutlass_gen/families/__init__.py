"""The kernel families, one module each (its spec dataclasses, its catalog per SM): the one registry
that the CLI, the catalog and the runtime read. A new family is a module here, its template under
templates/, and its plan under qgemm/.

FAMILIES: spec class by family name (a spec's `family`); CATALOGS: by family name, the function
giving the kernels `qgemm build --sm N` compiles by default."""
from . import conv, fp8, fpaintb, w8a8

MODULES = (w8a8, fp8, fpaintb, conv)
CATALOGS = {family: kernels for module in MODULES for family, kernels in module.CATALOGS.items()}
FAMILIES = {cls.family: cls for module in MODULES for cls in vars(module).values()
            if isinstance(cls, type) and cls.__module__ == module.__name__ and "family" in vars(cls)}
assert sorted(FAMILIES) == sorted(CATALOGS), (sorted(FAMILIES), sorted(CATALOGS))
