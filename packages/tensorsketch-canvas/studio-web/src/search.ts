// Node search (the toolbar's "find node"): which node a typed query names. Pure.

/** The node a search names: the exact name, else the only one it starts (or, failing that,
 * appears in), ignoring case (null: none, or several). */
export function findNode(names: readonly string[], query: string): string | null {
  const q = query.trim().toLowerCase();
  if (!q) return null;
  const exact = names.find((n) => n.toLowerCase() === q);
  if (exact) return exact;
  const starts = names.filter((n) => n.toLowerCase().startsWith(q));
  if (starts.length === 1) return starts[0];
  const inside = names.filter((n) => n.toLowerCase().includes(q));
  return starts.length === 0 && inside.length === 1 ? inside[0] : null;
}

