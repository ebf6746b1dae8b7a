// The analytics tracker, served at /script.js. One tag records a site:
//   <script async src="https://api.example.com/script.js" data-website-id="…"></script>
// Page views (also SPA route changes through the history API), the referrer,
// page load time, and custom events (data-event attributes, or
// window.portfolioAnalytics.track(name, props)). Nothing when the browser
// sends Do Not Track or Global Privacy Control. No cookie: the session id
// lives in sessionStorage (this tab only), or in memory when that is refused.
// It never throws into the page. docs/analytics.md says what it sends, and why.
(function () {
  'use strict';
  function warn(message) {
    if (window.console && console.warn) console.warn('portfolio analytics: ' + message);
  }
  var script = document.currentScript;
  // A module has no currentScript, so its data-website-id cannot be read.
  if (!script) return warn('load script.js as a classic script (<script async src=...>), not type="module"');
  // One tracker a page: a second tag (in a layout and in a page, or run again
  // by a router) counted every page view and click twice.
  if (window.portfolioAnalytics && window.portfolioAnalytics.loaded) return;
  // A pasted id often brings a space or a line break along.
  var websiteId = (script.getAttribute('data-website-id') || '').trim();
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(websiteId)) {
    return warn('data-website-id="' + websiteId + '" is not the id of a website (a UUID); nothing is recorded');
  }
  var dnt = navigator.doNotTrack === '1' || window.doNotTrack === '1' || navigator.msDoNotTrack === '1';
  var gpc = navigator.globalPrivacyControl === true;
  var api = { track: function () {}, loaded: true };
  window.portfolioAnalytics = api;
  if (dnt || gpc) return;

  var endpoint = (script.getAttribute('data-host-url') || new URL(script.src).origin).replace(/\/$/, '') + '/api/analytics';
  var KEY = 'portfolio-analytics-session';
  // A session ends after 30 minutes without an event, as analytics tools count
  // them: a tab left open for a day was one session of a day.
  var SESSION_IDLE_MS = 30 * 60 * 1000;
  var memory = null;
  // Safari on an iPad (iPadOS 13+) sends a Mac's user agent word for word, and
  // a Mac has no touch screen: the API counts such an event as a tablet. Sent
  // only then, so no other browser says more about itself than its user agent.
  var touchScreenMac = /Macintosh/.test(navigator.userAgent) && navigator.maxTouchPoints > 1;

  function newId() {
    return crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2) + Date.now().toString(36);
  }

  // The tab's session: its id, its last event (`at`), and the outside page its
  // visit came from (`source`). Says whether `referrer` is that source again:
  // document.referrer stays the same through a reload, or a return through
  // history to the landing page, and the visit came from there once.
  function session(referrer) {
    var now = Date.now();
    var current = memory;
    try {
      current = JSON.parse(sessionStorage.getItem(KEY)) || current;
    } catch (e) {}
    if (!current || !current.id || !(now - current.at < SESSION_IDLE_MS)) current = { id: newId() };
    var repeated = referrer !== undefined && referrer === current.source;
    if (referrer !== undefined) current.source = referrer;
    current.at = now;
    memory = current;
    try {
      sessionStorage.setItem(KEY, JSON.stringify(current));
    } catch (e) {}
    return { id: current.id, repeated: repeated };
  }

  // Of the query only the campaign tags: other parameters often carry tokens or e-mail addresses.
  function campaignTags(search) {
    var tags = [];
    new URLSearchParams(search).forEach(function (value, name) {
      if (/^utm_(source|medium|campaign|term|content)$/.test(name)) tags.push(encodeURIComponent(name) + '=' + encodeURIComponent(value));
    });
    return tags.join('&');
  }

  function currentPage() {
    var tags = campaignTags(location.search);
    return location.pathname + (tags ? '?' + tags : '');
  }

  function send(eventType, fields) {
    try {
      var current = session(fields.referrer);
      if (current.repeated) fields.referrer = undefined;
      var event = { websiteId: websiteId, eventType: eventType, page: currentPage(), userAgent: navigator.userAgent, sessionId: current.id };
      if (touchScreenMac) event.touchScreen = true;
      for (var name in fields) if (fields[name] !== undefined) event[name] = fields[name];
      var body = JSON.stringify(event);
      // text/plain is a CORS "simple request": no preflight; the answer is not read.
      if (navigator.sendBeacon && navigator.sendBeacon(endpoint, new Blob([body], { type: 'text/plain' }))) return;
      fetch(endpoint, { method: 'POST', body: body, headers: { 'Content-Type': 'text/plain' }, mode: 'no-cors', keepalive: true }).catch(function () {});
    } catch (e) {
      // Props JSON cannot hold (a cycle, a BigInt), or a data-host-url that is
      // no http(s) URL: the event is dropped and the page goes on.
    }
  }

  function loadTime() {
    var entry = performance.getEntriesByType && performance.getEntriesByType('navigation')[0];
    if (!entry || !(entry.loadEventEnd > 0)) return undefined;
    // A prerendered page may have loaded before it was shown: the visitor waited from then on, if at all.
    var ms = Math.max(0, Math.round(entry.loadEventEnd - Math.max(entry.startTime, entry.activationStart || 0)));
    // The API refuses a loadTime outside 0 to 1 hour (and the page view with it).
    return ms <= 3600000 ? ms : undefined;
  }

  // Only other sites are sources: on a site of many pages, each page reached from another carried that one.
  function externalReferrer() {
    var bare = function (host) {
      return host.replace(/^www\./, '');
    };
    try {
      if (bare(new URL(document.referrer).hostname) === bare(location.hostname)) return undefined;
    } catch (e) {}
    return document.referrer ? document.referrer.slice(0, 2048) : undefined;
  }

  // The URL the page was loaded from: with async, the page's own scripts may have rewritten it before this one runs.
  var navigation = performance.getEntriesByType && performance.getEntriesByType('navigation')[0];
  var landingTags = '';
  try {
    landingTags = campaignTags(navigation ? new URL(navigation.name).search : location.search);
  } catch (e) {
    // A navigation entry whose name is no URL: the landing tags are not known.
  }
  var referrer = externalReferrer();
  var lastPath;
  var counted = false;
  function pageView(first) {
    // Routers rewrite the URL while the page hydrates, before the load event:
    // the first page view is the one sent on load, with its load time.
    if (!counted && !first) return;
    counted = true;
    window.removeEventListener('beforeunload', firstPageView);
    // The same path twice in a row counts once: a page that tidies the campaign tags out of its URL has not moved.
    if (location.pathname === lastPath) return;
    lastPath = location.pathname;
    var page = currentPage();
    // Such a rewrite may have taken the landing URL's campaign tags with it.
    if (first && landingTags && page.indexOf('?') < 0) page += '?' + landingTags;
    var metadata = { screen: screen.width + 'x' + screen.height };
    if (first) metadata.loadTime = loadTime();
    send('page_view', { page: page, referrer: referrer, metadata: metadata });
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
  // A page restored from the back/forward cache runs no script again, yet it is shown again.
  window.addEventListener('pageshow', function (e) {
    if (e.persisted && counted) {
      lastPath = undefined;
      pageView();
    }
  });

  // The first page view waits for the load event, so its load time is known;
  // a page whose load never ends (a stalled image or script) is still counted,
  // without a load time, 10 s in, or when the visitor leaves or hides it first.
  function firstPageView() {
    if (counted) return;
    // A prerendered page (speculation rules, the address bar) may never be shown: it counts once it is.
    if (document.prerendering) return document.addEventListener('prerenderingchange', firstPageView, { once: true });
    pageView(true);
  }
  // Before the load event a leaving page fires no pagehide: beforeunload it
  // is, listened to only until the first page view (it is no reason to keep
  // a page out of the back/forward cache, but neither is it needed after).
  window.addEventListener('beforeunload', firstPageView);
  window.addEventListener('pagehide', firstPageView);
  document.addEventListener('visibilitychange', function () {
    if (document.visibilityState === 'hidden') firstPageView();
  });
  if (document.readyState === 'complete') firstPageView();
  else {
    window.addEventListener('load', function () { setTimeout(firstPageView, 0); });
    setTimeout(firstPageView, 10000);
  }
})();
