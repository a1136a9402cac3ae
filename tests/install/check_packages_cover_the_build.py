#!/usr/bin/env python3
"""install.packages_cover_the_build: every Debian package the configure step found files of is
installed by ./ember.sh (listed in its packages=(...) or pulled in by their Depends).

On a fresh Debian 12 `./ember.sh train` once failed at configure: a CMake config needed OpenCL's
headers, whose package this machine happened to have but ember.sh's list (installed with
--no-install-recommends) did not pull in. This check takes every file and directory the
configure step recorded in CMakeCache.txt (find_path/find_library/find_program results, *_DIR of
package configs, *_INCLUDE_DIR(S), *_LIBRARY/*_LIBRARIES, compilers and tools), finds the Debian
package that ships each (dpkg -S), and fails naming each package that a fresh machine would not
get from ember.sh.

  check_packages_cover_the_build.py --cache build/release/CMakeCache.txt --ember-sh ember.sh
  ... --self-test --work-dir DIR   the check fails for a package ember.sh does not install

Exempt: Essential and Priority: required packages (on every Debian machine), and the optional
CUDA toolkit (paths under /usr/local/cuda*, NVIDIA's packages). Not Debian (no dpkg/apt-cache):
prints EMBER_SKIP and exits 0.

Limit: a directory such as /usr/include is shipped by dozens of packages, so an *_INCLUDE_DIR of
/usr/include is covered by any of them; the library, config directory or program found next to
it (OpenCL_LIBRARY, dnnl_DIR, ...) is what names the missing package.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

# Cache entries that name things the configure step found. Besides these names, every PATH and
# FILEPATH entry (find_path, find_library, find_program results), except CMAKE_INSTALL_* settings.
ENTRY_NAME = re.compile(r"(_INCLUDE_DIRS?|_LIBRARY|_LIBRARIES|_LIBRARY_(RELEASE|DEBUG)|_DIR"
                        r"|_COMPILER|_EXECUTABLE|_COMMAND|_PROGRAM)$")
# The optional CUDA toolkit, by package name (NVIDIA's repository and Debian's non-free packages).
CUDA_PACKAGE = re.compile(r"^(cuda-|libcuda|libcublas|libcufft|libcufile|libcurand|libcusolver"
                          r"|libcusparse|libcupti|libnccl|libcudnn|cudnn|libnpp|libnvjpeg"
                          r"|libnvjitlink|libnvrtc|libnvtoolsext|libnvvm|libnvidia-|nvidia-"
                          r"|libthrust-dev|libcub-dev|libaccinj)")
DEP_KINDS = ("Depends", "PreDepends")
MERGED_USR_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def bare(name):
    """A package name without <virtual> brackets and :amd64/:any qualifiers."""
    return name.strip().strip("<>").split(":", 1)[0]


def read_cache(path):
    entries = []  # (name, type, value)
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith(("#", "//")):
                continue
            m = re.match(r"^([^:=]+):([A-Z]+)=(.*)$", line)
            if m:
                entries.append(m.groups())
    return entries


def read_packages(ember_sh):
    with open(ember_sh, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\s*packages=\((.*?)\)", text, re.S | re.M)
    if not m:
        sys.exit(f"FAIL: no packages=(...) list in {ember_sh}")
    body = re.sub(r"#[^\n]*", "", m.group(1))
    return [p.strip("'\"") for p in body.split()]


def found_paths(entries, cache_path):
    """(entry, path) for every absolute path the configure step found, outside ember's trees."""
    values = {name: value for name, _, value in entries}
    trees = [os.path.dirname(os.path.abspath(cache_path))]
    for key in ("CMAKE_CACHEFILE_DIR", "CMAKE_HOME_DIRECTORY"):
        if values.get(key):
            trees.append(values[key])
    trees = {os.path.realpath(t) for t in trees} | {os.path.normpath(t) for t in trees}

    def in_trees(p):
        return any(p == t or p.startswith(t + "/") for t in trees)

    result = []
    for name, kind, value in entries:
        if name.endswith(("-ADVANCED", "-MODIFIED")) or kind == "STATIC":
            continue
        if name.startswith("CMAKE_INSTALL_"):
            continue  # install destinations (settings, not something found)
        if not (kind in ("PATH", "FILEPATH") or ENTRY_NAME.search(name)):
            continue
        for item in value.split(";"):
            item = item.strip()
            if not item.startswith("/") or item.endswith("NOTFOUND"):
                continue
            item = os.path.normpath(item)
            if in_trees(item) or in_trees(os.path.realpath(item)):
                continue
            result.append((name, item))
    return result


def merged_usr_twin(p):
    """Debian 12 merged /usr: dpkg may know /lib/x or /usr/lib/x, whichever the package shipped."""
    parts = p.split("/")
    if len(parts) > 2 and parts[1] in MERGED_USR_DIRS:
        return "/usr" + p
    if len(parts) > 3 and parts[1] == "usr" and parts[2] in MERGED_USR_DIRS:
        return p[len("/usr"):]
    return None


def managed(p):
    """Under /usr (or merged /lib, /bin, ...) but not /usr/local: the package manager's files."""
    if not p.startswith("/usr/"):
        p = merged_usr_twin(p) or p
    return p.startswith("/usr/") and not p.startswith("/usr/local/")


def forms(p):
    """The names to ask dpkg about, in order: the path as the cache has it, each symlink hop
    (/usr/bin/c++ -> /etc/alternatives/c++ -> /usr/bin/g++), its real path; with /usr twins."""
    chain = [p]
    cur = p
    for _ in range(40):
        if not os.path.islink(cur):
            break
        cur = os.path.normpath(os.path.join(os.path.dirname(cur), os.readlink(cur)))
        chain.append(cur)
    chain.append(os.path.realpath(p))
    out = []
    for c in chain:
        for f in (c, merged_usr_twin(c)):
            if f and f not in out:
                out.append(f)
    return out


def dpkg_owners(paths):
    """{path: [package, ...]} in one dpkg -S call (paths no package owns are absent)."""
    owners = {}
    if not paths:
        return owners
    # Absolute paths without wildcards are matched exactly; exit status 1 = some had no owner.
    out = subprocess.run(["dpkg-query", "-S"] + sorted(paths), capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith(("diversion by", "local diversion")) or ": " not in line:
            continue
        pkgs, path = line.rsplit(": ", 1)
        owners.setdefault(path, []).extend(bare(x) for x in pkgs.split(","))
    return owners


def package_fields(packages):
    """{package: (essential, priority)} for installed packages, one dpkg-query call."""
    fields = {}
    if not packages:
        return fields
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Essential}\t${Priority}\n"]
                         + sorted(packages), capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            fields[bare(parts[0])] = (parts[1], parts[2])
    return fields


def depends_graph(roots):
    """{package: [dependency, ...]} over Depends/PreDepends only, from one recursive apt-cache
    call. An alternative (`|Depends: a` then `Depends: b`) and the providers of a virtual package
    (`Depends: <v>` followed by indented provider names) are all edges: apt installs one of
    them, and any of them satisfies the dependency, so a path owned by any counts as covered."""
    out = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                          "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"]
                         + list(roots), capture_output=True, text=True).stdout
    graph = {}
    current = None
    last_dep = None  # the virtual package the indented provider lines belong to
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            current = bare(line)
            graph.setdefault(current, [])
            last_dep = None
            continue
        m = re.match(r"^\s*\|?([A-Za-z]+): (.*)$", line)
        if m:
            last_dep = None
            if m.group(1) in DEP_KINDS and current is not None:
                dep = bare(m.group(2).split(" ", 1)[0])
                graph[current].append(dep)
                if m.group(2).startswith("<"):
                    last_dep = dep
        elif last_dep is not None:  # a provider of the virtual package on the line above
            graph.setdefault(last_dep, []).append(bare(line))
    return graph


def closure(graph, roots):
    """{package: chain from a root} for everything the roots pull in (breadth first)."""
    reached = {}
    queue = []
    for r in roots:
        if r not in reached:
            reached[r] = [r]
            queue.append(r)
    for pkg in queue:
        for dep in graph.get(pkg, []):
            if dep not in reached:
                reached[dep] = reached[pkg] + [dep]
                queue.append(dep)
    return reached


class Analysis:
    """Which package each found path needs, independent of which packages ember.sh lists."""

    def __init__(self, cache):
        self.cache = cache
        self.found = found_paths(read_cache(cache), cache)
        forms_of = {p: forms(p) for _, p in self.found}
        all_forms = {f for fs in forms_of.values() for f in fs}
        owners = dpkg_owners(all_forms)
        # per path: (the form dpkg knows, its owners) or (None, [])
        self.owned = {}
        for p, fs in forms_of.items():
            hit = next((f for f in fs if f in owners), None)
            self.owned[p] = (hit, sorted(set(owners.get(hit, []))))
        self.fields = package_fields({o for _, os_ in self.owned.values() for o in os_})

    def exemption(self, pkg):
        essential, priority = self.fields.get(pkg, ("", ""))
        if essential == "yes":
            return "essential"
        if priority == "required":
            return "priority required"
        if CUDA_PACKAGE.match(pkg):
            return "CUDA toolkit"
        return None


def check(analysis, listed, graph, verbose=True):
    """Returns (failures, report lines); a failure is (package, entry, path, form)."""
    reached = closure(graph, listed)
    failures, notes, lines = [], [], []
    covered = {}  # package -> [(entry, path)]
    exempt = {}  # reason -> count of paths
    cuda_paths = 0
    for entry, p in analysis.found:
        form, owners = analysis.owned[p]
        if p.startswith("/usr/local/cuda") or os.path.realpath(p).startswith("/usr/local/cuda"):
            cuda_paths += 1
            continue
        if not os.path.exists(p):
            notes.append(f"note: {entry}={p} does not exist (a stale cache entry?): not checked")
            continue
        if not owners:
            # /usr outside /usr/local is the package manager's (FHS): a file there that no
            # package ships was put there by hand, so a fresh machine running ember.sh lacks
            # it and the build would find something else or nothing: a failure. /usr/local,
            # /opt and home directories are for local installs (the CUDA toolkit, pyenv's
            # python3): ember.sh cannot install those, and ember's build treats them as
            # optional or finds Debian's instead on a fresh machine: a note.
            real = os.path.realpath(p)
            if managed(p) and managed(real):
                failures.append(("(no package)", entry, p, real))
            else:
                notes.append(f"note: {entry}={p}: no Debian package owns it (a local install, "
                             "not checked)")
            continue
        chains = [reached[o] for o in owners if o in reached]
        if chains:
            best = min(chains, key=len)
            covered.setdefault(best[-1], []).append((entry, p, best))
            continue
        reasons = [analysis.exemption(o) for o in owners]
        if any(reasons):
            reason = next(r for r in reasons if r)
            exempt[reason] = exempt.get(reason, 0) + 1
            continue
        failures.append((owners, entry, p, form))

    pkgs = set(covered)
    lines.append(f"{len(analysis.found)} paths found by the configure step in {analysis.cache}; "
                 f"{len(pkgs)} packages of ember.sh's {len(listed)} (with their Depends: "
                 f"{len(reached)}) cover them")
    if verbose:
        for pkg in sorted(covered):
            chain = covered[pkg][0][2]
            how = "listed" if len(chain) == 1 else "via " + " > ".join(chain)
            entries = sorted({e for e, _, _ in covered[pkg]})
            more = f" (+{len(entries) - 3})" if len(entries) > 3 else ""
            lines.append(f"  covered: {pkg} ({how}): {', '.join(entries[:3])}{more}")
    for reason in sorted(exempt):
        lines.append(f"  exempt: {exempt[reason]} paths of {reason} packages")
    if cuda_paths:
        lines.append(f"  exempt: {cuda_paths} paths under /usr/local/cuda (the optional CUDA toolkit)")
    lines.extend("  " + n for n in notes)
    return failures, lines


def failure_lines(failures):
    lines = []
    for owners, entry, p, form in failures:
        if owners == "(no package)":
            real = "" if form == p else f" (-> {form})"
            lines.append(f"FAIL: {entry}={p}{real}: no Debian package owns it, under /usr; "
                         "a fresh machine will not have it")
            continue
        via = "" if form == p else f" (as {form})"
        lines.append(f"FAIL: package {' or '.join(owners)} is not installed by ember.sh: "
                     f"{entry}={p}{via} belongs to it; add it to packages=(...) in ember.sh, or "
                     "make the build not need it")
    return lines


def run_check(cache, ember_sh):
    listed = read_packages(ember_sh)
    analysis = Analysis(cache)
    graph = depends_graph(listed)
    failures, lines = check(analysis, listed, graph)
    print("\n".join(lines))
    if failures:
        print("\n".join(failure_lines(failures)))
        return 1
    print("ok: every package the build found files of is installed by ember.sh")
    return 0


def run_script(args):
    proc = subprocess.run([sys.executable, os.path.abspath(__file__)] + args,
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def self_test(cache, ember_sh, work_dir):
    """The check fails, naming the package, (1) for a cache that found a file of an installed
    package ember.sh does not pull in (the OpenCL bug), (2) for ember.sh without one of its
    packages the build needs. Each runs the script as ctest's first test does."""
    os.makedirs(work_dir, exist_ok=True)
    listed = read_packages(ember_sh)
    analysis = Analysis(cache)
    graph = depends_graph(listed)
    reached = closure(graph, listed)
    ran, ok = 0, True

    # (1) An installed package outside ember.sh's Depends closure, and one file only it ships.
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}\t${Package}\t${Essential}"
                          "\t${Priority}\n"], capture_output=True, text=True).stdout
    candidates = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 4 or not parts[0].startswith("ii"):
            continue
        pkg = bare(parts[1])
        if (pkg in reached or parts[2] == "yes" or parts[3] == "required"
                or CUDA_PACKAGE.match(pkg)):
            continue
        candidates.append(pkg)
    listing = subprocess.run(["dpkg-query", "-L"] + sorted(set(candidates)),
                             capture_output=True, text=True).stdout if candidates else ""
    # A program, library or header, like what the configure step finds, owned by that package alone.
    files = sorted({f for f in listing.splitlines() if f.startswith(("/usr/bin/", "/usr/lib/",
                                                                     "/usr/include/"))},
                   key=lambda f: (not f.startswith("/usr/bin/"), f))
    files = [f for f in files if os.path.isfile(f) and not os.path.islink(f)][:2000]
    owners = dpkg_owners(files)
    candidates = set(candidates)
    pick = next(((f, owners[f][0]) for f in files
                 if len(set(owners.get(f, []))) == 1 and owners[f][0] in candidates), None)
    if pick:
        f, pkg = pick
        copy = os.path.join(work_dir, "CMakeCache.txt")
        with open(cache, encoding="utf-8", errors="replace") as src:
            text = src.read()
        with open(copy, "w", encoding="utf-8") as dst:
            dst.write(text.rstrip("\n") + "\n\n// injected by --self-test: a file of package "
                      f"{pkg}, which ember.sh does not install\n"
                      f"EMBER_SELF_TEST_LIBRARY:FILEPATH={f}\n")
        rc, output = run_script(["--cache", copy, "--ember-sh", ember_sh])
        good = rc == 1 and re.search(rf"FAIL: package ({re.escape(pkg)}|.* or {re.escape(pkg)})"
                                     r"( or .*)? is not installed.*EMBER_SELF_TEST_LIBRARY", output)
        print(f"self-test 1: {copy} adds EMBER_SELF_TEST_LIBRARY={f} (package {pkg}): "
              f"exit {rc}, {'fails naming ' + pkg if good else 'DID NOT fail naming ' + pkg}")
        print("  | " + "\n  | ".join(l for l in output.splitlines() if "FAIL" in l or rc != 1))
        ran += 1
        ok = ok and bool(good)
    else:
        print("self-test 1: not run: every installed package is covered by ember.sh or exempt")

    # (2) A listed package without which some found path is no longer covered.
    drop = None
    for name in listed:
        rest = [p for p in listed if p != name]
        failures, _ = check(analysis, rest, graph, verbose=False)
        named = [o for owners_, _, _, _ in failures if owners_ != "(no package)" for o in owners_]
        if named:
            drop = (name, named[0])
            break
    if drop:
        name, pkg = drop
        with open(ember_sh, encoding="utf-8") as src:
            text = src.read()
        m = re.search(r"^\s*packages=\((.*?)\)", text, re.S | re.M)
        body = re.sub(rf"(?<![\w.+-]){re.escape(name)}(?![\w.+-])", "", m.group(1), count=1)
        copy = os.path.join(work_dir, "ember.sh")
        with open(copy, "w", encoding="utf-8") as dst:
            dst.write(text[:m.start(1)] + body + text[m.end(1):])
        rc, output = run_script(["--cache", cache, "--ember-sh", copy])
        good = rc == 1 and re.search(rf"FAIL: package (.* or )?{re.escape(pkg)}( or .*)? is not",
                                     output)
        print(f"self-test 2: {copy} without {name}: exit {rc}, "
              f"{'fails naming ' + pkg if good else 'DID NOT fail naming ' + pkg}")
        print("  | " + "\n  | ".join(l for l in output.splitlines() if "FAIL" in l or rc != 1))
        ran += 1
        ok = ok and bool(good)
    else:
        print("self-test 2: not run: no listed package is the only way a found path is covered")

    if ran == 0:
        print("EMBER_SKIP: nothing to inject or drop on this machine")
        return 0
    print("ok: the check names the missing package" if ok else "FAIL: see above")
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", required=True, help="the build directory's CMakeCache.txt")
    parser.add_argument("--ember-sh", required=True, help="ember.sh, with its packages=(...)")
    parser.add_argument("--self-test", action="store_true",
                        help="check that the check fails for a package ember.sh does not install")
    parser.add_argument("--work-dir", help="--self-test: where the modified copies go")
    args = parser.parse_args()
    missing = [t for t in ("dpkg-query", "apt-cache") if shutil.which(t) is None]
    if missing or not os.path.isdir("/var/lib/dpkg/info"):
        print(f"EMBER_SKIP: not a Debian machine ({', '.join(missing) or 'no dpkg database'})")
        return 0
    if args.self_test:
        if not args.work_dir:
            parser.error("--self-test needs --work-dir")
        return self_test(args.cache, args.ember_sh, args.work_dir)
    return run_check(args.cache, args.ember_sh)


if __name__ == "__main__":
    sys.exit(main())
