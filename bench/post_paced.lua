-- post.lua with a pause before each request, after the previous answer:
-- the second script argument, in ms. One connection of it is a client that
-- creates now and then, whose creates never queue behind each other's work.
dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "post.lua")

local post_init = init
local pause_ms

function init(args)
  post_init(args)
  pause_ms = tonumber(args[2] or "10")
end

function delay()
  return pause_ms
end
