// The analytics tracker, served at /script.js. One tag records a site:
//   <script defer src="https://api.example.com/script.js" data-website-id="…"></script>
// Page views (also SPA route changes through the history API), the referrer,
// page load time, and custom events (data-event attributes, or
// window.portfolioAnalytics.track(name, props)). Nothing when the browser
// sends Do Not Track or Global Privacy Control. No cookie: the session id
// lives in sessionStorage (this tab only), or in memory when that is refused.
(function () {
  'use strict';
  var script = document.currentScript;
  if (!script) return;
  var websiteId = script.getAttribute('data-website-id');
  var dnt = navigator.doNotTrack === '1' || window.doNotTrack === '1' || navigator.msDoNotTrack === '1';
  var gpc = navigator.globalPrivacyControl === true;
  var api = { track: function () {} };
  window.portfolioAnalytics = api;
  if (!websiteId || dnt || gpc) return;

  var endpoint = (script.getAttribute('data-host-url') || new URL(script.src).origin).replace(/\/$/, '') + '/api/analytics';
  var KEY = 'portfolio-analytics-session';
  var sessionId;
  try {
    sessionId = sessionStorage.getItem(KEY);
    if (!sessionId) sessionStorage.setItem(KEY, (sessionId = newId()));
  } catch (e) {
    sessionId = newId();
  }

  function newId() {
    return crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2) + Date.now().toString(36);
  }

  // The path, and of the query only the campaign tags: other parameters often carry tokens or e-mail addresses.
  function currentPage() {
    var tags = [];
    new URLSearchParams(location.search).forEach(function (value, name) {
      if (/^utm_(source|medium|campaign|term|content)$/.test(name)) tags.push(encodeURIComponent(name) + '=' + encodeURIComponent(value));
    });
    return location.pathname + (tags.length ? '?' + tags.join('&') : '');
  }

  function send(eventType, fields) {
    var event = { websiteId: websiteId, eventType: eventType, page: currentPage(), userAgent: navigator.userAgent, sessionId: sessionId };
    for (var name in fields) if (fields[name] !== undefined) event[name] = fields[name];
    var body = JSON.stringify(event);
    // text/plain is a CORS "simple request": no preflight; the answer is not read.
    var blob = new Blob([body], { type: 'text/plain' });
    if (navigator.sendBeacon && navigator.sendBeacon(endpoint, blob)) return;
    fetch(endpoint, { method: 'POST', body: body, headers: { 'Content-Type': 'text/plain' }, mode: 'no-cors', keepalive: true }).catch(function () {});
  }

  function loadTime() {
    var entry = performance.getEntriesByType && performance.getEntriesByType('navigation')[0];
    var ms = entry && entry.loadEventEnd > 0 ? Math.round(entry.loadEventEnd - entry.startTime) : -1;
    // The API refuses a loadTime outside 0 to 1 hour (and the page view with it).
    return ms >= 0 && ms <= 3600000 ? ms : undefined;
  }

  var lastPage;
  var loaded = false;
  var referrer = document.referrer;
  function pageView(first) {
    // Routers rewrite the URL while the page hydrates, before the load event:
    // the first page view is the one sent on load, with its load time.
    if (!loaded && !first) return;
    loaded = true;
    var page = currentPage();
    if (page === lastPage) return;
    lastPage = page;
    var metadata = { screen: screen.width + 'x' + screen.height };
    if (first) metadata.loadTime = loadTime();
    send('page_view', { referrer: referrer ? referrer.slice(0, 2048) : undefined, metadata: metadata });
    // The visit's source is counted once, on its first page; route changes inside the site carry none.
    referrer = undefined;
  }

  function properties(element) {
    var props = {};
    for (var i = 0; i < element.attributes.length; i += 1) {
      var attribute = element.attributes[i];
      var match = /^data-event-(.+)$/.exec(attribute.name);
      if (match) props[match[1]] = attribute.value;
    }
    return props;
  }

  function custom(eventType, name, props) {
    var metadata = { event: String(name).slice(0, 200) };
    for (var key in props) if (key !== 'event') metadata[key] = props[key];
    send(eventType, { metadata: metadata });
  }

  api.track = function (name, props) {
    if (name) custom('custom', name, props || {});
  };

  document.addEventListener('click', function (e) {
    var element = e.target && e.target.closest && e.target.closest('[data-event]');
    if (element && element.tagName !== 'FORM') custom('click', element.getAttribute('data-event'), properties(element));
  }, true);
  document.addEventListener('submit', function (e) {
    var form = e.target;
    if (form && form.getAttribute && form.getAttribute('data-event')) custom('form_submit', form.getAttribute('data-event'), properties(form));
  }, true);

  // Single-page apps change routes with the history API; popstate covers back and forward.
  ['pushState', 'replaceState'].forEach(function (method) {
    var original = history[method];
    history[method] = function () {
      var result = original.apply(this, arguments);
      setTimeout(pageView, 0);
      return result;
    };
  });
  window.addEventListener('popstate', function () { pageView(); });

  // The first page view waits for the load event, so its load time is known;
  // a page whose load never ends (a stalled image or script) is still counted,
  // without a load time, 10 s in.
  function firstPageView() {
    if (!loaded) pageView(true);
  }
  if (document.readyState === 'complete') firstPageView();
  else {
    window.addEventListener('load', function () { setTimeout(firstPageView, 0); });
    setTimeout(firstPageView, 10000);
  }
})();
