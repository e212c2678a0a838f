# Shared by scripts/up and scripts/test (sourced, not run).

# ensure_venv EXTRAS: create .venv if missing and install into it, editable: first the
# light client (`pip install -e clients/python`, the distribution chronomem-client),
# then `pip install -e .[EXTRAS]` (EXTRAS comma-separated, e.g. "test,embed"), whose
# requirement on chronomem-client is then already satisfied, so pip never looks for it
# on an index. The install is skipped while neither pyproject.toml has changed since
# the last one (the stamp holds both).
ensure_venv() {
  local spec="." stamp
  [ -n "${1:-}" ] && spec=".[$1]"
  if [ ! -x .venv/bin/python ]; then
    local py="${PYTHON:-python3}"
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
      || { echo "need Python 3.11+ ($py is $("$py" -V 2>&1)); set PYTHON=..." >&2; exit 1; }
    if ! "$py" -m venv .venv 2>/dev/null; then
      # Debian/Ubuntu ship venv's ensurepip separately.
      rm -rf .venv
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        local ver
        ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        apt-get update -qq && apt-get install -y -qq "python${ver}-venv" >/dev/null
      fi
      "$py" -m venv .venv
    fi
  fi
  stamp=".venv/.chronomem-installed-${1:-base}"
  if [ ! -f "$stamp" ] || ! cat pyproject.toml clients/python/pyproject.toml | cmp -s - "$stamp"
  then
    case ",${1:-}," in
      *,embed,*)
        # torch first and pinned: that version's CPU-only wheel satisfies the `embed`
        # extra's range, so pip does not fetch a multi-GB CUDA build for it.
        .venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" ;;
    esac
    .venv/bin/python -m pip install -q --disable-pip-version-check -e clients/python
    .venv/bin/python -m pip install -q --disable-pip-version-check -e "$spec"
    case ",${1:-}," in
      # The local model's ONNX export (workers/onnx_embedding.py), once, at install time.
      *,embed,*) .venv/bin/python -m workers.onnx_embedding ;;
    esac
    cat pyproject.toml clients/python/pyproject.toml >"$stamp"
  fi
}
