"""A piece of `sitecustomize` the benchmarks share: patch a module right after it is imported.

`AFTER_IMPORT` is source text, put at the top of a benchmark's `sitecustomize` hook (a file on
PYTHONPATH, so it runs in every process of a run: driver, env workers, lerobot-eval). It
defines `after_import({module name: patch})`: each `patch(module)` runs once that module has
been imported by someone else; the hook imports nothing itself, so a process that never
imports the module pays nothing.
"""

AFTER_IMPORT = '''
import importlib.abc, sys

class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, patches):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run, patch = spec.loader.exec_module, self.patches[name]
        def exec_module(module):
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec

def after_import(patches):
    sys.meta_path.insert(0, _AfterImport(patches))
'''
