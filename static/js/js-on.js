// Lets the CSS hide what only a page without JavaScript needs (loaded, not deferred, from
// every page's head: the Content-Security-Policy allows no inline script).
document.documentElement.classList.add("js");
