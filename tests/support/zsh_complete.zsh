#!/usr/bin/zsh -f
# zsh_complete.zsh FPATH_DIR OUT_FILE LINE
#
# Completes LINE (completion happens at its end) in a real interactive zsh,
# driven through a pseudo-terminal (zsh/zpty), with compinit and the
# completion functions of FPATH_DIR, and appends every candidate zsh offers to
# OUT_FILE, one per line, then "<done>". Used by tests/e2e/test_cli_completion.cpp.
zmodload zsh/zpty || { print -u2 "zsh_complete: no zsh/zpty module"; exit 2 }
local dir=$1 out=$2 line=$3
: >| $out
zpty anchorz zsh -f -i
zpty -w anchorz "PS1=''; PROMPT=''; fpath=(${(q)dir} \$fpath); autoload -Uz compinit; compinit -u -D"
# Every match a completion function adds is also written to OUT_FILE. Calls that
# already collect matches into an array (-O, -A, -D) are the helpers'
# (_describe, _arguments) own and pass through untouched.
zpty -w anchorz "compadd() { if (( \${@[(I)-[OAD]]} )); then builtin compadd \"\$@\"; return; fi; local -a __hits; builtin compadd -O __hits \"\$@\"; (( \$#__hits )) && print -rl -- \$__hits >> ${(q)out}; builtin compadd \"\$@\"; }"
zpty -w anchorz "_capture_done() { print -r -- '<done>' >> ${(q)out} }; comppostfuncs=( _capture_done )"
zpty -w -n anchorz "$line"$'\t'
local i
for i in {1..200}; do
  grep -q '^<done>$' $out 2>/dev/null && break
  sleep 0.05
done
zpty -d anchorz
grep -q '^<done>$' $out || { print -u2 "zsh_complete: no completion ran for '$line'"; exit 1 }
