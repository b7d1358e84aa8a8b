// Messages to the user: the toast (what just happened) and the banner (why the file is shown
// read-only).
import { parseErrorNotice } from "./captions";
import { byId } from "./dom";
import { syncBars } from "./stage";
import { state } from "./store";
import type { GraphResponse } from "./types";

let toastTimer = 0;

/** Show ``msg`` for ``ms`` (a click hides it sooner). */
export function toast(msg: string, kind: "info" | "error" | "conflict" = "info", ms = 6000): void {
  const t = byId("toast");
  t.textContent = msg;
  t.className = kind;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = window.setTimeout(() => (t.hidden = true), ms);
}

/** The banner for ``resp``: shown while the file does not parse, hidden otherwise. */
export function setBanner(resp: GraphResponse): void {
  const b = byId("banner");
  const pe = resp.parse_error;
  if (pe) {
    const notice = parseErrorNotice(resp.file, pe, !!state.graph);
    b.innerHTML = "";
    const strong = document.createElement("strong");
    strong.textContent = notice.lead;
    b.append(strong, document.createTextNode(notice.text));
    const tail = document.createElement("span");
    tail.className = "tail";
    tail.textContent = notice.tail;
    b.append(tail);
    b.hidden = false;
  } else {
    b.hidden = true;
  }
  syncBars();
}

/** Say so in the banner when the page was opened without its token. */
export function warnNoToken(): void {
  byId("banner").textContent = "No token in the URL: open the address `python -m tensorsketch.canvas FILE` printed (it ends in ?token=…).";
  byId("banner").hidden = false;
}

export function mountNotices(): void {
  byId("toast").addEventListener("click", () => (byId("toast").hidden = true));
}
