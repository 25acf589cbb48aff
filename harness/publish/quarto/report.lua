-- Quarto filter for index.qmd (declared in _quarto.yml), so that `quarto render` and the harness's
-- own renderer (harness/publish/render.py, no Quarto) give the same page:
-- 1. The document's title is the study's: its first level-1 heading (printed by the title cell) is
--    lifted into the title and leaves the body, and an italic line right under it into the subtitle. index.qmd's header carries a placeholder title only
--    because, with none, Quarto's Jupyter engine lifts the first markdown heading instead
--    ("## About this dataset"), which then drops out of the table of contents.
-- 2. A figure cell whose output holds no image (e.g. "One leg only: there is no ratio to plot.") is
--    text, not a figure: it gets no caption and no number, as the harness's renderer does it.

-- The first heading of the document, looked for inside Divs too: rendered from the executed notebook
-- (harness/publish/render.py renders the page from it), a cell's output sits in the cell's Div.
-- Returns the list that holds it and its index there, or nil when the first heading is not level 1.
local function first_h1(blocks)
  for i, b in ipairs(blocks) do
    if b.t == "Header" then
      if b.level == 1 then return blocks, i end
      return nil
    end
    if b.t == "Div" then
      local hit = nil
      pandoc.Div(b.content):walk({ Header = function(h) hit = hit or h end })
      if hit ~= nil then
        return first_h1(b.content)
      end
    end
  end
  return nil
end

return {
  {
    FloatRefTarget = function(float)
      if float.type ~= "Figure" then return nil end
      local has_image = false
      pandoc.Div(float.content):walk({ Image = function(_) has_image = true end })
      if has_image then return nil end
      return float.content
    end,
    Pandoc = function(doc)
      local holder, i = first_h1(doc.blocks)
      if holder ~= nil then
        doc.meta.title = holder[i].content
        holder:remove(i)
        -- The study's long title, printed in italics right under the heading, is the page's subtitle
        -- (REPORT.md keeps it as the italic line: its title block shows no subtitle).
        local nxt = holder[i]
        if FORMAT:match("html") and nxt ~= nil and nxt.t == "Para" and #nxt.content == 1 and nxt.content[1].t == "Emph" then
          doc.meta.subtitle = nxt.content[1].content
          holder:remove(i)
        end
      end
      return doc
    end,
  },
}
