// The DOM helpers the canvas's panels and the debugger's share: an element builder and a
// typed lookup by id.

/** A new element's properties: its own (typed), plus ``data-*``, ``aria-*`` and ``for``, which
 * are set as attributes. A null, undefined or false value is left unset. */
export type Props<K extends keyof HTMLElementTagNameMap> = {
  [P in keyof HTMLElementTagNameMap[K]]?: HTMLElementTagNameMap[K][P] | null | false;
} & Record<string, unknown>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props<K> = {},
  ...kids: (Node | string | null | false | undefined)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("data-") || k.startsWith("aria-") || k === "for") e.setAttribute(k, String(v));
    else (e as unknown as Record<string, unknown>)[k] = v;
  }
  for (const kid of kids) if (kid !== null && kid !== false && kid !== undefined) e.append(kid);
  return e;
}

/** The page's element ``id`` (the page's HTML has every id the code asks for). */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  return document.getElementById(id) as T;
}
