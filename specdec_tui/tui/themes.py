"""Textual themes kept as TOML data files, loaded when the app starts."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from textual.theme import Theme

COLOR_FIELDS = ("primary", "secondary", "accent", "foreground", "background", "surface", "panel",
                "success", "warning", "error", "boost")
REQUIRED = ("name", "primary")
DEFAULT_THEME = "specdec-dark"


#: The bundled themes: package data (``tui/bundled_themes`` links to the repository's ``themes/`` folder, and a
#: wheel carries the files themselves), so an installed package has them as an editable one does.
BUNDLED = Path(__file__).with_name("bundled_themes")


def theme_dirs() -> list[Path]:
    """The bundled themes, then the user's own ``themes/`` in the config folder."""
    return [BUNDLED, Path(platformdirs.user_config_dir("specdec-tui")) / "themes"]


@dataclass(frozen=True)
class ThemeLoad:
    themes: list[Theme]
    problems: list[str]


def parse_theme(path: Path) -> Theme:
    """One theme file; ValueError with a one-line reason if it is not usable."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"theme {path.name} cannot be read: {exc}") from exc
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise ValueError(f"theme {path.name} lacks {', '.join(missing)}")
    unknown = set(data) - {*COLOR_FIELDS, "name", "dark", "variables"}
    if unknown:
        raise ValueError(f"theme {path.name} has unknown key {min(unknown)!r}")
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ValueError(f"theme {path.name}: [variables] must map names to colour strings")
    try:
        theme = Theme(name=str(data["name"]), dark=bool(data.get("dark", True)), variables=dict(variables),
                      **{key: str(data[key]) for key in COLOR_FIELDS if key in data})
        # Parsing every colour now turns a typo into a message here rather than a crash later.
        theme.to_color_system().generate()
    except Exception as exc:  # colour parsing raises several kinds
        raise ValueError(f"theme {path.name} has a bad colour: {exc}") from exc
    return theme


def load_themes(folders: list[Path] | None = None) -> ThemeLoad:
    themes, problems = [], []
    for folder in folders if folders is not None else theme_dirs():
        for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
            try:
                themes.append(parse_theme(path))
            except ValueError as exc:
                problems.append(str(exc))
    return ThemeLoad(themes, problems)
