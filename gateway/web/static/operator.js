// The operator view's live figures: every element with data-refresh is redrawn from that URL every
// few seconds. Without this script the pages show the same figures on a reload.
"use strict";

(() => {
  const INTERVAL_MS = 3000;
  for (const element of document.querySelectorAll("[data-refresh]")) {
    const url = element.dataset.refresh;
    setInterval(async () => {
      if (document.hidden) return;
      try {
        const response = await fetch(url, { credentials: "same-origin" });
        if (response.ok) element.innerHTML = await response.text();
      } catch (error) {
        // the gateway is restarting: the next tick tries again
      }
    }, INTERVAL_MS);
  }
})();
