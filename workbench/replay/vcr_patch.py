"""vcrpy's patching of a test's HTTP libraries, as `use_cassette` does it, for a fraction of its cost.

vcrpy's `use_cassette` builds, at every cassette, a `unittest.mock.patch.object` for each of ~30
attributes of every HTTP library it knows, and tries to import each library's modules to find
them: a library that is not installed is a failed import, a search of `sys.path`, per library per
cassette. A suite of vcr-marked tests paid ~8 ms a test for it, more than the test's replay.

`use_cassette` here is vcrpy's, with two costs removed and nothing else changed:

* a library's patchers are built only when the library is imported. `vcr.patch`, on its own
  import, imports every installed library it patches (it saves their originals then), so an
  installed library is imported by the time a cassette opens, whenever the suite first imports it;
* each patch is a plain attribute swap with `mock.patch.object`'s effect (the attribute restored,
  or removed again when it was inherited), not a `mock.patch.object`.

The patchers vcrpy builds (their per-cassette connection classes, its urllib3 pools' connection
removers, aiohttp's and tornado's wrappers, `custom_patches`, `skip_patchers`) are its own, and
are entered at each cassette and undone at its end, as vcrpy does: a test without a cassette runs
on the libraries as they were."""

from __future__ import annotations

import contextlib
import functools
import itertools
import sys

from vcr.cassette import Cassette, CassetteContextDecorator
from vcr.patch import CassettePatcherBuilder

# vcrpy's patcher groups (vcr.patch.PATCHER_NAMES), and the modules that must be imported for
# each: its group would import them, or fail to
_GROUP_MODULES = {
    "httplib": (),
    "requests": ("urllib3.connectionpool",),
    "boto3": ("botocore.awsrequest",),
    "urllib3": ("urllib3.connectionpool",),
    "httplib2": ("httplib2",),
    "tornado": ("tornado.simple_httpclient", "tornado.curl_httpclient"),  # either
    "aiohttp": ("aiohttp.client",),
    "httpx": ("httpx",),
    "httpx2": ("httpx2",),
}


def use_cassette(vcr, path: str, **options) -> CassetteContextDecorator:
    """`vcr.use_cassette(path, **options)` (a context manager), patching as described above."""
    return _CassetteUse(Cassette, functools.partial(vcr.get_merged_config, path=path, **options))


class _CassetteUse(CassetteContextDecorator):
    def _patch_generator(self, cassette):
        with contextlib.ExitStack() as exit_stack:
            for patcher in _Builder(cassette).build():
                exit_stack.enter_context(patcher)
            yield cassette


class _Builder(CassettePatcherBuilder):
    def build(self):
        skip = set(self._cassette.skip_patchers)
        imported = sys.modules
        # every group called before any patch is entered, as in vcrpy: a group imports its stubs,
        # whose classes derive from the library's classes, which must not be patched by then
        groups = [getattr(self, "_" + name)() for name, modules in _GROUP_MODULES.items()
                  if name not in skip and (not modules or any(module in imported for module in modules))]
        return itertools.chain(*groups, self._build_patchers_from_mock_triples(self._cassette.custom_patches))

    def _build_patcher(self, obj, patched_attribute, replacement_class):
        if not hasattr(obj, patched_attribute):
            return None
        return _Swap(obj, patched_attribute, self._recursively_apply_get_cassette_subclass(replacement_class))


class _Swap:
    """`mock.patch.object(target, attribute, new)`'s effect: the attribute replaced while entered,
    then restored when the target held it itself, else removed (it was inherited or absent)."""

    __slots__ = ("target", "attribute", "new", "original", "local")

    def __init__(self, target, attribute: str, new) -> None:
        self.target, self.attribute, self.new = target, attribute, new

    def __enter__(self):
        held = getattr(self.target, "__dict__", {})
        self.local = self.attribute in held
        self.original = held[self.attribute] if self.local else None
        setattr(self.target, self.attribute, self.new)
        return self.new

    def __exit__(self, *exc_info) -> None:
        if self.local:
            setattr(self.target, self.attribute, self.original)
        else:
            delattr(self.target, self.attribute)
        self.original = None
