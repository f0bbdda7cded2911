// exechost console on the web: trade the link's one-use ticket for the one-use secret of this page's
// websocket, then let textual.js connect with it. The secret lives only in this page's memory and in the
// websocket's URL (never a navigation, so never in the browser's history, session or cache); the ticket
// in the address bar is spent by the trade and opens nothing again.
(function () {
  "use strict";
  const connect = window.onload; // textual.js's: it reads the terminal's websocket URL, then connects
  window.onload = null;
  const NEW_LINK = "Press Enter where `exechost console --web` runs for a new link (each opens one tab, once).";
  window.addEventListener("load", async function () {
    const terminal = document.querySelector(".textual-terminal");
    // textual-serve's Restart reloads this URL, whose ticket is spent by now: say how to get another.
    const closed = document.querySelector(".closed-dialog .message");
    const restart = document.querySelector(".closed-dialog button");
    if (closed) {
      closed.textContent = "Session ended. " + NEW_LINK;
    }
    if (restart) {
      restart.remove();
    }
    let answer = null;
    try {
      const response = await fetch("session", { method: "POST", cache: "no-store", credentials: "omit" });
      answer = response.ok ? await response.json() : null;
    } catch (error) {
      answer = null;
    }
    if (!answer || typeof answer.websocket !== "string") {
      if (closed) {
        closed.textContent = "This link was used or has expired. " + NEW_LINK;
      }
      document.body.classList.add("-closed");
      return;
    }
    terminal.dataset.sessionWebsocketUrl = answer.websocket;
    if (typeof connect === "function") {
      connect.call(window, new Event("load"));
    }
  });
})();
