"""Capture docs/img/lsp-vim.png: Vim talking to ``plan lsp``, with diagnostics and a hover.

Nothing in the picture is drawn by hand.  The script runs a real Vim in a pseudo-terminal of a
fixed size, with a clean configuration (``vim -Nu VIMRC -i NONE``, ``HOME`` a temporary
directory) that loads the LSP client yegappan/lsp and registers ``plan lsp`` as the server for
``*.plan`` files, as docs/editors.md shows.  It opens a copy of the worked case
``specs/cases/serving-speculative.plan`` in which one field name is misspelt (the draft head's
``layers = 1`` written ``layres = 1``, so the head silently keeps all 36 layers of the model it
extends), waits until the server's warning sign is on that line, lists the diagnostics in a
location-list window (``:LspDiag show``), puts the cursor on ``tpot`` in ``solve cross`` and
presses ``K`` (mapped to ``:LspHover``), then waits until the hover popup shows its value.
Every byte Vim writes to the terminal is fed to pyte (a terminal-screen emulator); its screen
(characters, colours, bold, underline, reverse video and the cursor) is then drawn cell by cell
with Pillow in DejaVu Sans Mono.  The choices made here are the terminal's (its size, font and
16-colour palette) and the Vim configuration in ``VIMRC`` below (colour scheme ``habamax``).

Usage (from the repository root, in a virtual environment where ``plan lsp`` works, i.e.
``pip install -e ".[lsp]"``)::

    pip install pyte                  # the terminal emulator: a dependency of this script only
    git clone https://github.com/yegappan/lsp /tmp/yegappan-lsp
    git -C /tmp/yegappan-lsp checkout 33aef9d2f041d16f6e0c0adc9f486a5cf3724924
    python editors/screenshot/capture.py --client /tmp/yegappan-lsp   # -> docs/img/lsp-vim.png

The picture in docs/img was taken with Vim 9.0 (patches 1-1378, Debian's build), pyte 0.8.2
and yegappan/lsp at that commit; three runs gave the same bytes.  Options: ``--out PATH``,
``--vim PATH``, ``--size COLSxROWS`` (default 110x38), ``--font-size PX`` (default 14),
``--dump`` (also print the screen as text).  It exits 1 when the diagnostics or the hover do not
appear within ``--timeout`` seconds (default 60), printing the screen it saw.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import shutil
import signal
import struct
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "specs" / "cases" / "serving-speculative.plan"
TYPO = ("{ layers = 1 }", "{ layres = 1 }")          # one misspelt field name
DIAGNOSTIC = "did you mean 'layers'?"
HOVER_LINE, HOVER_WORD = "solve cross", "spec.tpot"   # the cursor goes on its last part
HOVER_SHOWS = "spec.tpot ="
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
FONT_BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"

VIMRC = """\
" the client: yegappan/lsp, and plan lsp for *.plan files, as docs/editors.md shows
set nocompatible
let &runtimepath = '{client},' .. &runtimepath
filetype plugin on
syntax on
au BufRead,BufNewFile *.plan setfiletype plan
runtime plugin/lsp.vim
call LspOptionsSet(#{{autoComplete: v:false, popupBorder: v:true}})
call LspAddServer([#{{name: 'plan', filetype: ['plan'], path: '{plan}', args: ['lsp']}}])
" the look of the picture
set noswapfile nobackup shortmess+=I laststatus=2 number signcolumn=yes
colorscheme habamax
nnoremap K <Cmd>LspHover<CR>
" the diagnostics in a location list three lines high, wrapped at spaces
nnoremap <Space>d <Cmd>LspDiag show<CR><Cmd>resize 3<CR><Cmd>setlocal linebreak<CR><Cmd>wincmd p<CR>
"""

# The terminal's palette for the 16 ANSI colours (the xterm defaults, with a softer black and
# white for the default background and foreground); 256-colour and RGB values come from pyte.
PALETTE = {
    "black": "000000", "red": "cd0000", "green": "00cd00", "brown": "cdcd00",
    "blue": "3b78ff", "magenta": "cd00cd", "cyan": "00cdcd", "white": "e5e5e5",
    "brightblack": "7f7f7f", "brightred": "ff0000", "brightgreen": "00ff00",
    "brightbrown": "ffff00", "brightblue": "5c5cff", "brightmagenta": "ff00ff",
    "brightcyan": "00ffff", "brightwhite": "ffffff",
}
DEFAULT_FG, DEFAULT_BG = "d0d0d0", "1c1c1c"


def make_screen(cols: int, rows: int):
    import pyte

    class Screen(pyte.Screen):
        def select_graphic_rendition(self, *attrs, **kw):
            # Vim sends xterm's "CSI > 4 ; 2 m" (modifyOtherKeys), which pyte parses as SGR
            if kw.get("private"):
                return
            super().select_graphic_rendition(*attrs)

    screen = Screen(cols, rows)
    return screen, pyte.ByteStream(screen)


class Terminal:
    """A program in a pseudo-terminal of a fixed size, its output fed to a pyte screen."""

    def __init__(self, argv: list[str], cols: int, rows: int, env: dict, cwd: str):
        self.screen, self.stream = make_screen(cols, rows)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:                                   # the child: exec the program
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def pump(self, seconds: float) -> bool:
        """Read output for up to ``seconds``; whether anything came."""
        got, end = False, time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return got
            r, _, _ = select.select([self.fd], [], [], left)
            if not r:
                return got
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return got
            if not data:
                return got
            self.stream.feed(data)
            got = True

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, needle, timeout: float) -> bool:
        """Wait until ``needle`` (a string, or a test of the screen's text) is on the screen."""
        test = needle if callable(needle) else (lambda text: needle in text)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.pump(0.1)
            if test(self.text()):
                return True
        return False

    def settle(self, quiet: float = 0.8, timeout: float = 10) -> None:
        """Wait until nothing has been written for ``quiet`` seconds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.pump(quiet):
            pass

    def send(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def close(self) -> None:
        try:
            self.send("\x1b:qa!\r")
            self.pump(1.0)
        finally:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            os.close(self.fd)


def colour(value: str, default: str) -> tuple[int, int, int]:
    if value == "default":
        value = default
    value = PALETTE.get(value.replace("bfight", "bright"), value)   # pyte 0.8 spells one "bfightmagenta"
    value = PALETTE.get(value, value)
    if value == "default" or len(value) != 6:
        value = default
    return tuple(int(value[i:i + 2], 16) for i in (0, 2, 4))


def render(screen, path: Path, font_size: int, pad: int = 10) -> None:
    """Draw the pyte screen: one cell per character, its background, its glyph in its colour."""
    from PIL import Image, ImageDraw, ImageFont
    regular = ImageFont.truetype(FONT, font_size)
    bold = ImageFont.truetype(FONT_BOLD, font_size)
    cw = round(regular.getlength("M"))
    ascent, descent = regular.getmetrics()
    ch = ascent + descent + 1
    w, h = screen.columns * cw + 2 * pad, screen.lines * ch + 2 * pad
    img = Image.new("RGB", (w, h), colour("default", DEFAULT_BG))
    draw = ImageDraw.Draw(img)
    cursor = None if screen.cursor.hidden else (screen.cursor.x, screen.cursor.y)
    for y in range(screen.lines):
        row = screen.buffer[y]
        for x in range(screen.columns):
            c = row[x]
            fg, bg = colour(c.fg, DEFAULT_FG), colour(c.bg, DEFAULT_BG)
            if c.reverse != ((x, y) == cursor):              # the cursor: a reversed cell
                fg, bg = bg, fg
            x0, y0 = pad + x * cw, pad + y * ch
            if bg != colour("default", DEFAULT_BG):
                draw.rectangle([x0, y0, x0 + cw - 1, y0 + ch - 1], fill=bg)
            if c.data and c.data != " ":
                draw.text((x0, y0), c.data, font=bold if c.bold else regular, fill=fg)
            if c.underscore:
                draw.line([x0, y0 + ch - 2, x0 + cw - 1, y0 + ch - 2], fill=fg)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, optimize=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client", required=True, help="a checkout of github.com/yegappan/lsp")
    ap.add_argument("--out", default=str(ROOT / "docs" / "img" / "lsp-vim.png"))
    ap.add_argument("--vim", default=shutil.which("vim") or "vim")
    ap.add_argument("--size", default="110x38", help="COLSxROWS of the terminal")
    ap.add_argument("--font-size", type=int, default=14)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--dump", action="store_true", help="also print the screen as text")
    a = ap.parse_args(argv)
    cols, rows = (int(n) for n in a.size.lower().split("x"))
    plan = shutil.which("plan", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                      os.environ.get("PATH", "")]))
    if plan is None:
        print("capture: no `plan` command (pip install -e '.[lsp]')", file=sys.stderr)
        return 2
    client = Path(a.client).resolve()
    if not (client / "plugin" / "lsp.vim").is_file():
        print(f"capture: {client} is not a checkout of yegappan/lsp", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="plan-lsp-shot-") as tmp:
        text = CASE.read_text(encoding="utf-8")
        assert text.count(TYPO[0]) == 1, "the worked case changed: update TYPO"
        src = Path(tmp) / CASE.name
        src.write_text(text.replace(TYPO[0], TYPO[1]), encoding="utf-8")
        lines = text.splitlines()
        start = lines.index(next(l for l in lines if l.startswith(HOVER_LINE)))
        lnum = next(i for i in range(start, len(lines)) if HOVER_WORD in lines[i])
        col = lines[lnum].index(HOVER_WORD) + HOVER_WORD.rindex(".") + 2   # ASCII: bytes = chars
        vimrc = Path(tmp) / "vimrc"
        vimrc.write_text(VIMRC.format(client=str(client).replace("'", "''"),
                                      plan=plan.replace("'", "''")), encoding="utf-8")
        env = {"HOME": tmp, "TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        term = Terminal([a.vim, "-Nu", str(vimrc), "-i", "NONE", src.name], cols, rows, env, tmp)
        try:
            typo = next(l for l in src.read_text(encoding="utf-8").splitlines() if TYPO[1] in l)
            signed = lambda text: any(l.startswith("W>") and l.endswith(typo) for l in text.splitlines())
            if not term.wait_for(signed, a.timeout):          # the warning's sign on its line
                print(term.text())
                print("capture: no diagnostic on the misspelt line", file=sys.stderr)
                return 1
            term.settle()
            term.send(" d")                                   # the location list
            if not term.wait_for(DIAGNOSTIC, a.timeout):
                print(term.text())
                print("capture: the diagnostic's text did not appear", file=sys.stderr)
                return 1
            term.settle()
            term.send(f"{lnum + 1}G0{col - 1}l")            # normal-mode motions: no command line
            term.settle()
            term.send("K")
            if not term.wait_for(HOVER_SHOWS, a.timeout):
                print(term.text())
                print("capture: the hover did not appear", file=sys.stderr)
                return 1
            term.settle()
            if DIAGNOSTIC not in term.text():
                print(term.text())
                print("capture: the hover hides the diagnostic: change the size", file=sys.stderr)
                return 1
            if a.dump:
                print(term.text())
            render(term.screen, Path(a.out), a.font_size)
        finally:
            term.close()
    print(f"wrote {a.out} ({Path(a.out).stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
