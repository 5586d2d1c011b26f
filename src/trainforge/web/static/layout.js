// The page frame on a phone or a narrow window: the sidebar folds away behind a Menu button
// (app.css shows the button below 760 px), and opens over the page until a link is taken.
"use strict";

(() => {
  const button = document.getElementById("menu-button");
  const sidebar = document.getElementById("sidebar");
  if (!button || !sidebar) return;
  const open = (on) => {
    sidebar.classList.toggle("open", on);
    button.setAttribute("aria-expanded", String(on));
  };
  button.addEventListener("click", () => open(!sidebar.classList.contains("open")));
  sidebar.addEventListener("click", (event) => { if (event.target.closest("a, button")) open(false); });
  document.addEventListener("keydown", (event) => { if (event.key === "Escape") open(false); });
})();
