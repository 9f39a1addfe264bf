"""Tests of lab/import-circles.py on small crates made in a temp dir, and on copies of the
repo's crates with a circle planted. Everything is written under a TemporaryDirectory this
file made; the repo is only read. Run: python3 -B -m unittest discover -s lab -p 'test_*.py'"""
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.dont_write_bytecode = True  # nothing written beside the checker
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "import-circles.py")
_spec = importlib.util.spec_from_file_location("import_circles", SCRIPT)
ic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ic)


class FakeCrate(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="ipl-circles-")
        self.addCleanup(tmp.cleanup)
        self.src = os.path.join(tmp.name, "src")

    def crate(self, files):
        """Writes files ({relative path: source}) under self.src."""
        for rel, text in files.items():
            path = os.path.join(self.src, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(text))

    def edges(self, root="lib.rs"):
        """{(from, to): sorted lines}, paths relative to src."""
        g = ic.Crate(os.path.join(self.src, root)).build()
        rel = lambda f: os.path.relpath(f, self.src)
        return {(rel(a), rel(b)): sorted(ls) for a, bs in g.items() for b, ls in bs.items()}

    def report(self):
        out = io.StringIO()
        found = ic.check(self.src, out)
        return found, out.getvalue()


class Edges(FakeCrate):
    def test_use_line(self):
        self.crate({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\n", "b.rs": "pub struct B;\n"})
        self.assertEqual(self.edges(), {("a.rs", "b.rs"): [1]})

    def test_grouped_and_nested_use(self):
        self.crate({
            "lib.rs": "mod a;\nmod b;\nmod c;\n",
            "a.rs": "use crate::{\n    b::B,\n    c::{self, d::D},\n};\nfn f() { c::g(); }\n",
            "b.rs": "pub struct B;\n",
            "c.rs": "pub mod d;\npub fn g() {}\n",
            "c/d.rs": "pub struct D;\n",
        })
        self.assertEqual(self.edges(), {("a.rs", "b.rs"): [2], ("a.rs", "c/d.rs"): [3], ("a.rs", "c.rs"): [5]})

    def test_use_with_self_and_super_prefixes(self):
        self.crate({
            "lib.rs": "mod p;\n",
            "p/mod.rs": "mod x;\nmod y;\npub struct P;\n",
            "p/x.rs": "use super::y::Y;\nuse super::P as Q;\n",
            "p/y.rs": "use self::z::Z;\nmod z;\npub struct Y;\n",
            "p/y/z.rs": "pub struct Z;\n",
        })
        self.assertEqual(self.edges(), {
            ("p/x.rs", "p/y.rs"): [1], ("p/x.rs", "p/mod.rs"): [2], ("p/y.rs", "p/y/z.rs"): [1]})

    def test_inline_crate_path(self):
        self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub fn f() -> Option<crate::b::B> {\n    None\n}\n",
            "b.rs": "pub struct B;\n",
        })
        self.assertEqual(self.edges(), {("a.rs", "b.rs"): [1]})

    def test_inline_super_path_child_to_parent(self):
        self.crate({
            "lib.rs": "mod p;\n",
            "p.rs": "mod c;\npub struct P;\n",
            "p/c.rs": "fn f() { let _ = super::P; }\n",
        })
        self.assertEqual(self.edges(), {("p/c.rs", "p.rs"): [1]})

    def test_inline_path_through_a_child_module_name(self):
        # `xfrm::X` where xfrm is a declared child: the parent names its child's item.
        self.crate({
            "lib.rs": "mod backend;\n",
            "backend/mod.rs": "mod xfrm;\nfn f() -> xfrm::X { xfrm::X }\n",
            "backend/xfrm.rs": "pub struct X;\n",
        })
        self.assertEqual(self.edges(), {("backend/mod.rs", "backend/xfrm.rs"): [2]})

    def test_imported_module_then_named_by_path(self):
        self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b;\n\nfn f() -> b::B { b::B }\n",
            "b.rs": "pub struct B;\n",
        })
        # The module import alone is no edge; naming its item is.
        self.assertEqual(self.edges(), {("a.rs", "b.rs"): [3]})

    def test_reexport_chain_goes_to_the_defining_file(self):
        self.crate({
            "lib.rs": "pub mod backend;\npub mod evidence;\npub use backend::Pcrypt as Top;\n",
            "backend/mod.rs": "pub mod xfrm;\npub use xfrm::Pcrypt;\n",
            "backend/xfrm/mod.rs": "mod pcrypt;\npub(crate) use pcrypt::{Pcrypt, Other};\n",
            "backend/xfrm/pcrypt.rs": "pub struct Pcrypt;\npub struct Other;\n",
            "evidence.rs": "pub struct E {\n    a: crate::backend::Pcrypt,\n    b: crate::Top,\n}\n",
        })
        self.assertEqual(self.edges(), {("evidence.rs", "backend/xfrm/pcrypt.rs"): [2, 3]})

    def test_glob_reexport_goes_to_its_module(self):
        self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "fn f() { crate::b::thing(); let _ = crate::b::Macro; }\n",
            "b.rs": "mod inner;\npub use inner::*;\n",
            "b/inner.rs": "pub fn thing() {}\n",
        })
        # thing is found in inner; Macro (say from a macro) is not, so the glob's module.
        self.assertEqual(self.edges(), {("a.rs", "b/inner.rs"): [1]})

    def test_reexport_alone_is_no_edge_but_using_it_is(self):
        self.crate({
            "lib.rs": "mod p;\n",
            "p.rs": "mod c;\npub use c::C;\n",
            "p/c.rs": "pub struct C;\n",
        })
        self.assertEqual(self.edges(), {})
        self.crate({"p.rs": "mod c;\npub use c::C;\n\npub fn f() -> C { C }\n"})
        self.assertEqual(self.edges(), {("p.rs", "p/c.rs"): [4]})

    def test_crate_root_reexport_goes_to_its_source(self):
        self.crate({
            "lib.rs": "mod family;\nmod plan;\npub use family::Family;\n",
            "family.rs": "pub enum Family { V4 }\n",
            "plan.rs": "fn f() -> crate::Family { crate::Family::V4 }\n",
        })
        self.assertEqual(self.edges(), {("plan.rs", "family.rs"): [1]})

    def test_exported_macro_goes_to_its_file(self):
        self.crate({
            "lib.rs": "mod log;\nmod a;\n",
            "log.rs": "#[macro_export]\nmacro_rules! say {\n    () => {};\n}\n",
            "a.rs": "fn f() {\n    crate::say!();\n}\n",
        })
        self.assertEqual(self.edges(), {("a.rs", "log.rs"): [2]})

    def test_comments_and_strings_are_ignored(self):
        self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": textwrap.dedent("""\
                // use crate::b::B;
                /// crate::b::B in a doc comment
                /* use crate::b::B; /* nested */ crate::b::B */
                const S: &str = "use crate::b::B; crate::b::B";
                const R: &str = r#"crate::b::B "quoted" "#;
                const C: char = '"';
                fn f<'a>(x: &'a str) -> &'a str { x }
            """),
            "b.rs": "pub struct B;\n",
        })
        self.assertEqual(self.edges(), {})

    def test_cfg_test_code_is_ignored(self):
        self.crate({
            "lib.rs": "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n",
            "a.rs": textwrap.dedent("""\
                #[cfg(test)]
                use crate::b::B;

                #[cfg(test)]
                #[allow(dead_code)]
                fn helper() -> crate::b::B { crate::b::B }

                #[cfg(test)]
                mod tests {
                    use super::*;
                    use crate::b::B;
                    fn t() { let _ = B; }
                }
            """),
            "b.rs": "pub struct B;\nuse crate::a;\n",
            "tests.rs": "use crate::a::A;\n",
        })
        self.assertEqual(self.edges(), {})

    def test_mod_declaration_is_no_edge(self):
        self.crate({
            "lib.rs": "pub mod a;\nmod b;\n",
            "a.rs": "pub mod c;\n",
            "a/c.rs": "pub struct C;\n",
            "b.rs": "",
        })
        self.assertEqual(self.edges(), {})

    def test_parent_naming_a_child_item_and_child_naming_parent_is_a_circle(self):
        self.crate({
            "lib.rs": "mod p;\n",
            "p/mod.rs": "mod c;\npub struct P;\nfn f() { c::g() }\n",
            "p/c.rs": "use super::P;\npub fn g() {}\n",
        })
        found, out = self.report()
        self.assertEqual(found, 1, out)
        self.assertIn("p/c.rs -> p/mod.rs -> p/c.rs", out)


class Circles(FakeCrate):
    def test_two_file_circle_with_the_lines(self):
        self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B;\n\nfn f() -> crate::a::A { crate::a::A }\n",
        })
        found, out = self.report()
        self.assertEqual(found, 1, out)
        self.assertIn("import circle: a.rs -> b.rs -> a.rs", out)
        self.assertIn(os.path.join(self.src, "a.rs") + ":1: use crate::b::B;", out)
        self.assertIn(os.path.join(self.src, "b.rs") + ":3: fn f()", out)

    def test_three_file_circle_reported_once(self):
        self.crate({
            "lib.rs": "mod a;\nmod b;\nmod c;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "use crate::c::C;\npub struct B;\n",
            "c.rs": "use crate::a::A;\npub struct C;\n",
        })
        found, out = self.report()
        self.assertEqual(found, 1, out)
        self.assertIn("import circle: a.rs -> b.rs -> c.rs -> a.rs", out)
        for line in ("a.rs:1:", "b.rs:1:", "c.rs:1:"):
            self.assertIn(line, out)

    def test_no_circle_exits_0_and_a_circle_exits_1(self):
        self.crate({"main.rs": "mod a;\nmod b;\nfn main() {}\n", "a.rs": "use crate::b::B;\n",
                    "b.rs": "pub struct B;\n"})
        run = lambda: subprocess.run([sys.executable, SCRIPT, self.src], capture_output=True, text=True)
        self.assertEqual(run().returncode, 0, run().stdout)
        self.crate({"b.rs": "pub struct B;\nfn f() { crate::a::g() }\n", "a.rs": "use crate::b::B;\npub fn g() {}\n"})
        done = run()
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("a.rs -> b.rs -> a.rs", done.stdout)


def crate_dirs():
    """The repo's crate src directories, as `make lint` names them."""
    dirs = [os.path.join(REPO, "src")]
    crates = os.path.join(REPO, "crates")
    for name in sorted(os.listdir(crates)):
        if os.path.isfile(os.path.join(crates, name, "src", "lib.rs")):
            dirs.append(os.path.join(crates, name, "src"))
    return dirs


class RealCrates(unittest.TestCase):
    """Each real crate, copied, with a two-file circle planted in the copy: the checker
    must find it (its parser copes with the real code, and the circle is not lost)."""

    def test_a_planted_circle_is_found_in_a_copy_of_each_crate(self):
        for src in crate_dirs():
            with self.subTest(crate=os.path.relpath(src, REPO)), \
                    tempfile.TemporaryDirectory(prefix="ipl-circles-") as tmp:
                copy = os.path.join(tmp, "src")
                shutil.copytree(src, copy)
                root = os.path.join(copy, "main.rs" if os.path.isfile(os.path.join(copy, "main.rs")) else "lib.rs")
                with open(root, "a", encoding="utf-8") as f:
                    f.write("\nmod planted_a;\nmod planted_b;\n")
                with open(os.path.join(copy, "planted_a.rs"), "w", encoding="utf-8") as f:
                    f.write("use crate::planted_b::B;\npub struct A;\n")
                with open(os.path.join(copy, "planted_b.rs"), "w", encoding="utf-8") as f:
                    f.write("pub struct B;\npub fn f() -> Option<crate::planted_a::A> {\n    None\n}\n")
                out = io.StringIO()
                self.assertGreaterEqual(ic.check(copy, out), 1)
                self.assertIn("planted_a.rs -> planted_b.rs -> planted_a.rs", out.getvalue())
                self.assertIn("planted_b.rs:2:", out.getvalue())
                done = subprocess.run([sys.executable, SCRIPT, copy], capture_output=True, text=True)
                self.assertEqual(done.returncode, 1, done.stdout)


if __name__ == "__main__":
    unittest.main()
